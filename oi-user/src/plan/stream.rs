//! The stream's encoding: each word of the data stream (their meaning is in `plan`) is
//! written as an unsigned LEB128 number, seven bits a byte, low bits first, the high bit
//! set on every byte but the last. The words a walk writes are mostly small (lengths,
//! capacities, counts, flags), so a string of up to 127 characters takes two bytes rather
//! than sixteen: the walk writes an eighth of the memory it used to, and the decoder reads
//! an eighth. Addresses take seven bytes, `u64::MAX` (a valueless variant) ten.
//!
//! The interpreter writes with [`push`], the JIT emits the same bytes (`jit::codegen`), the
//! decoder reads with [`read`]. Never panics on any input: a word cut short or longer than
//! ten bytes is an error.

/// Most bytes one word takes.
pub const MAX_WORD_BYTES: usize = 10;

/// Appends `w` to `out`.
#[inline]
pub fn push(out: &mut Vec<u8>, mut w: u64) {
    while w >= 0x80 {
        out.push((w as u8) | 0x80);
        w >>= 7;
    }
    out.push(w as u8);
}

/// Bytes `w` takes.
pub fn len(w: u64) -> usize {
    let bits = 64 - (w | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Why a word could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadError {
    /// The stream ends inside the word (or before it).
    Truncated,
    /// More than ten bytes, or bits beyond 64.
    Overlong,
}

/// Reads the word at `*pos` and moves `*pos` past it.
#[inline]
pub fn read(s: &[u8], pos: &mut usize) -> Result<u64, ReadError> {
    // One byte: nearly every word of a big sample.
    let b = *s.get(*pos).ok_or(ReadError::Truncated)?;
    if b < 0x80 {
        *pos += 1;
        return Ok(u64::from(b));
    }
    let mut w = 0u64;
    let mut i = *pos;
    for shift in (0..64).step_by(7) {
        let b = *s.get(i).ok_or(ReadError::Truncated)?;
        i += 1;
        let bits = u64::from(b & 0x7f);
        // The tenth byte carries the top bit only.
        if shift == 63 && bits > 1 {
            return Err(ReadError::Overlong);
        }
        w |= bits << shift;
        if b < 0x80 {
            *pos = i;
            return Ok(w);
        }
    }
    Err(ReadError::Overlong)
}

/// The encoding of `words` (tests and synthetic streams write their words this way).
pub fn encode(words: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(words.len());
    for &w in words {
        push(&mut out, w);
    }
    out
}

/// Every word of `s`, or the first error.
pub fn decode(s: &[u8]) -> Result<Vec<u64>, ReadError> {
    let mut pos = 0;
    let mut out = Vec::new();
    while pos < s.len() {
        out.push(read(s, &mut pos)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_lengths() {
        let words = [
            0,
            1,
            0x7f,
            0x80,
            0x3fff,
            0x4000,
            0x7fff_ffff_ffff,
            u64::MAX - 1,
            u64::MAX,
        ];
        let bytes = encode(&words);
        assert_eq!(decode(&bytes), Ok(words.to_vec()));
        for w in words {
            assert_eq!(encode(&[w]).len(), len(w), "{w:#x}");
        }
        assert_eq!(encode(&[0x7f, 0x80, 300]), [0x7f, 0x80, 0x01, 0xac, 0x02]);
        assert_eq!(len(u64::MAX), MAX_WORD_BYTES);
    }

    #[test]
    fn bad_words_are_errors() {
        assert_eq!(decode(&[0x80]), Err(ReadError::Truncated));
        assert_eq!(read(&[], &mut 0), Err(ReadError::Truncated));
        // Eleven bytes, and ten whose last carries more than bit 63.
        assert_eq!(decode(&[0xff; 11]), Err(ReadError::Overlong));
        let mut ten = vec![0xff; 9];
        ten.push(0x02);
        assert_eq!(decode(&ten), Err(ReadError::Overlong));
        ten[9] = 0x01;
        assert_eq!(decode(&ten), Ok(vec![u64::MAX]));
    }
}
