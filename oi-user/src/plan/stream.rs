//! The stream's encoding: each word of the data stream (their meaning is in `plan`) is
//! written as an unsigned LEB128 number, seven bits a byte, low bits first, the high bit
//! set on every byte but the last. The words a walk writes are mostly small (lengths,
//! capacities, counts, flags), so a string of up to 127 characters takes two bytes rather
//! than sixteen: the walk writes an eighth of the memory whole words would take, and the
//! decoder reads an eighth. Addresses take seven bytes, `u64::MAX` (a valueless variant) ten.
//!
//! The pointer word of a pointer node (`SmartPtr`, `RefWrap`, `RawPointer`, `HeapPointer`)
//! is written as its distance from the previous non-null one of the same root's stream
//! ([`PointerDelta`]): objects allocated one after another sit a few dozen bytes apart, so
//! an owned pointer of a `vector<unique_ptr<T>>` or a protobuf `RepeatedPtrField` takes one
//! or two bytes instead of seven, and null stays one byte.
//!
//! The strings of a vector (`vector<string>`, whose string layout has its pointer, length
//! and capacity inside the element) go in groups of [`STRING_GROUP`] from the first
//! ([`StringRuns`]): a group whose eight words are all below 128 and equal to the group
//! written just before it is not written; such groups are counted, and where their run ends
//! (a different group, the last group) the stream has [`RUN_MARKER`] and the count as a word.
//! The marker is the two bytes of 0 written overlong, which no word of the stream is, and it
//! stands only where a group would start, after the vector's first group. The strings after
//! the last whole group are written one by one. A vector of a million alike strings thus
//! takes a dozen bytes, and the JIT's loop rewrites one 8-byte word in place instead of
//! filling fresh stream lines; strings of varied lengths still take two bytes a string.
//!
//! The interpreter writes with [`push`], the JIT emits the same bytes (`jit::codegen`), the
//! decoder reads with [`read`]. Never panics on any input: a word cut short or longer than
//! ten bytes is an error.

/// Most bytes one word takes.
pub const MAX_WORD_BYTES: usize = 10;

/// Strings of a vector in a group (see the module's paragraph on runs).
pub const STRING_GROUP: usize = 4;

/// Where a run of repeated string groups ends: the word 0 in two bytes, never a word's
/// encoding (a canonical word's last byte is 0 only when it is the only byte).
pub const RUN_MARKER: [u8; 2] = [0x80, 0x00];

/// A group's eight words (length, capacity per string) as one little-endian word of their
/// low bytes: the group's bytes in the stream when every word is below 128.
pub fn pack_group(group: &[(u64, u64); STRING_GROUP]) -> u64 {
    group.iter().enumerate().fold(0, |g, (i, &(len, cap))| {
        g | (len & 0xff) << (16 * i) | (cap & 0xff) << (16 * i + 8)
    })
}

/// Writes a vector's strings with runs of repeated groups (the module's paragraph): the
/// interpreter's encoder, which the JIT's loop matches byte for byte.
#[derive(Debug, Default)]
pub struct StringRuns {
    group: [(u64, u64); STRING_GROUP],
    filled: usize,
    /// The last group written, when all its words were below 128.
    last: Option<u64>,
    /// Groups equal to `last` seen since it was written.
    run: u64,
}

impl StringRuns {
    /// The next string's (length, heap capacity or 0).
    pub fn push(&mut self, out: &mut Vec<u8>, len: u64, cap: u64) {
        self.group[self.filled] = (len, cap);
        self.filled += 1;
        if self.filled < STRING_GROUP {
            return;
        }
        self.filled = 0;
        let short = self.group.iter().all(|&(l, c)| (l | c) < 0x80);
        let g = pack_group(&self.group);
        if short && self.last == Some(g) {
            self.run += 1;
            return;
        }
        self.end_run(out);
        for &(l, c) in &self.group {
            push(out, l);
            push(out, c);
        }
        self.last = short.then_some(g);
    }

    /// After the last string: the open run, then the strings after the last whole group.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        self.end_run(out);
        for &(l, c) in &self.group[..self.filled] {
            push(out, l);
            push(out, c);
        }
        self.filled = 0;
    }

    fn end_run(&mut self, out: &mut Vec<u8>) {
        if self.run > 0 {
            out.extend_from_slice(&RUN_MARKER);
            push(out, self.run);
            self.run = 0;
        }
    }
}

/// Reads a vector's strings as [`StringRuns`] wrote them, one (length, capacity) at a time.
#[derive(Debug, Default)]
pub struct StringRunReader {
    group: [(u64, u64); STRING_GROUP],
    /// Strings read so far.
    at: u64,
    /// Strings left to repeat from `group`.
    repeat: u64,
}

/// What went wrong reading a vector's strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunError {
    Word(ReadError),
    /// A run of 0 groups, or of more than the vector has left.
    BadRun(u64),
}

impl From<ReadError> for RunError {
    fn from(e: ReadError) -> Self {
        RunError::Word(e)
    }
}

impl StringRunReader {
    /// A run marker at `*pos`, if the next string starts a group after the first: the
    /// number of groups it repeats (moved past), bounded by the `count − at` strings left.
    /// The caller then takes [`StringRunReader::repeat`]'s strings.
    pub fn run(&mut self, s: &[u8], pos: &mut usize, count: u64) -> Result<u64, RunError> {
        let boundary =
            self.at >= STRING_GROUP as u64 && self.at.is_multiple_of(STRING_GROUP as u64);
        if self.repeat > 0 || !boundary || s.get(*pos..*pos + 2) != Some(&RUN_MARKER[..]) {
            return Ok(0);
        }
        let mut p = *pos + 2;
        let groups = read(s, &mut p)?;
        let left = count.saturating_sub(self.at) / STRING_GROUP as u64;
        if groups == 0 || groups > left {
            return Err(RunError::BadRun(groups));
        }
        *pos = p;
        self.repeat = groups * STRING_GROUP as u64;
        Ok(groups)
    }

    /// The last group read (what a run repeats).
    pub fn group(&self) -> &[(u64, u64); STRING_GROUP] {
        &self.group
    }

    /// Skips the strings of a run that the caller accounted for at once.
    pub fn skip_run(&mut self) {
        self.at += self.repeat;
        self.repeat = 0;
    }

    /// The next string: from the repeated group, or its two words at `*pos` (after
    /// [`StringRunReader::run`]).
    #[inline]
    pub fn next(&mut self, s: &[u8], pos: &mut usize) -> Result<(u64, u64), ReadError> {
        let slot = (self.at % STRING_GROUP as u64) as usize;
        self.at += 1;
        if self.repeat > 0 {
            self.repeat -= 1;
            return Ok(self.group[slot]);
        }
        // Short strings (length and capacity below 128): two bytes.
        let lc = match s.get(*pos..*pos + 2) {
            Some(&[a, b]) if (a | b) < 0x80 => {
                *pos += 2;
                (u64::from(a), u64::from(b))
            }
            _ => (read(s, pos)?, read(s, pos)?),
        };
        self.group[slot] = lc;
        Ok(lc)
    }
}

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

/// The last non-null pointer word of a stream, against which the next one is written.
///
/// A pointer `p` after the last non-null pointer `last` (0 at the start of a root) is the
/// word 0 if `p` is null, else `z + 1`, where `z = zigzag(p - last)`. One non-null `p` has
/// no such word: `last + 2^63`, whose `z` is `u64::MAX`; it takes the word `m + 1`, where
/// `m = zigzag(0 - last)` is the `z` null would have (so `m + 1` is never another
/// pointer's word, and it is not 0: `m` is `u64::MAX` only when `last` is `2^63`, and then
/// `last + 2^63` is null). This is a bijection of the 64-bit words; arithmetic wraps, and
/// any 64-bit value comes back exactly. The JIT computes the common case in six
/// instructions, where an encoding as `z + (z < m)` would take sixteen on every pointer of
/// an array of owned pointers; the one exception is a cold branch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PointerDelta {
    pub last: u64,
}

/// Zigzag: small negative and positive numbers become small words (0, -1, 1, -2 → 0, 1, 2, 3).
pub fn zigzag(d: u64) -> u64 {
    (d << 1) ^ ((d as i64 >> 63) as u64)
}

fn unzigzag(z: u64) -> u64 {
    (z >> 1) ^ (z & 1).wrapping_neg()
}

impl PointerDelta {
    /// The word of pointer `p`; remembers `p` if it is not null.
    pub fn encode(&mut self, p: u64) -> u64 {
        if p == 0 {
            return 0;
        }
        let z = zigzag(p.wrapping_sub(self.last));
        let w = match z.checked_add(1) {
            Some(w) => w,
            None => zigzag(self.last.wrapping_neg()) + 1,
        };
        self.last = p;
        w
    }

    /// The pointer of word `w`, the inverse of [`PointerDelta::encode`].
    pub fn decode(&mut self, w: u64) -> u64 {
        if w == 0 {
            return 0;
        }
        let z = w - 1;
        let p = if z == zigzag(self.last.wrapping_neg()) {
            self.last.wrapping_add(1 << 63)
        } else {
            self.last.wrapping_add(unzigzag(z))
        };
        self.last = p;
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_deltas_round_trip_and_are_short() {
        let ptrs = [
            0x5555_5555_a000u64,
            0x5555_5555_a030,
            0,
            0x5555_5555_a060,
            0x5555_5555_a000,
            0x5555_5555_a000,
            1,
            u64::MAX,
            0,
            0x8000_0000_0000_0000,
            0x7fff_ffff_ffff_ffff,
            0x5555_5555_a000,
        ];
        let mut enc = PointerDelta::default();
        let words: Vec<u64> = ptrs.iter().map(|&p| enc.encode(p)).collect();
        let mut dec = PointerDelta::default();
        let back: Vec<u64> = words.iter().map(|&w| dec.decode(w)).collect();
        assert_eq!(back, ptrs);
        // 48 bytes on, null, 48 bytes on from the last non-null, 96 back, the same again.
        assert_eq!(&words[1..6], &[97, 0, 97, 192, 1]);
        // The one pointer whose zigzag distance has no successor: `last + 2^63`.
        let mut e = PointerDelta {
            last: 0x5555_5555_a000,
        };
        let w = e.encode(0x5555_5555_a000 + (1 << 63));
        assert_eq!(w, zigzag(0x5555_5555_a000u64.wrapping_neg()) + 1);
        // Every word of a pointer pair that straddles the null code comes back.
        for last in [0u64, 1, 2, 3, u64::MAX, 1 << 63, 0x5555_5555_a000] {
            for p in [
                1u64,
                2,
                3,
                last,
                last.wrapping_add(1),
                last.wrapping_sub(1),
                last.wrapping_add(1 << 63),
                last.wrapping_add(1 << 63).wrapping_add(1),
                last.wrapping_add(1 << 63).wrapping_sub(1),
                u64::MAX,
                1 << 63,
            ] {
                if p == 0 {
                    continue;
                }
                let mut e = PointerDelta { last };
                let mut d = PointerDelta { last };
                assert_eq!(d.decode(e.encode(p)), p, "{last:#x} {p:#x}");
                assert_eq!(d, e);
            }
        }
        // And every word is some pointer's: the words around null's `z` and the ends.
        for last in [1u64, 3, u64::MAX, 1 << 63, 0x5555_5555_a000] {
            let m = zigzag(last.wrapping_neg());
            for w in [
                0,
                1,
                2,
                m - 1,
                m,
                m.wrapping_add(1),
                m.wrapping_add(2),
                u64::MAX,
            ] {
                let p = PointerDelta { last }.decode(w);
                assert_eq!(PointerDelta { last }.encode(p), w, "{last:#x} {w:#x}");
            }
        }
    }

    /// Strings written with runs read back one by one; a forged run (of no group, or of
    /// more groups than the strings left) is an error, not a long loop.
    #[test]
    fn string_runs_round_trip_and_bad_runs_are_errors() {
        let a = [(32, 32), (32, 32), (32, 32), (32, 32)];
        let b = [(1, 0), (2, 0), (3, 0), (200, 0)];
        let mut strings: Vec<(u64, u64)> = Vec::new();
        for group in [a, a, a, b, b, a, a] {
            strings.extend(group);
        }
        strings.extend([(5, 0), (6, 0)]);
        let mut out = Vec::new();
        let mut w = StringRuns::default();
        for &(l, c) in &strings {
            w.push(&mut out, l, c);
        }
        w.finish(&mut out);
        // a, run of 2, b (long: twice), a, run of 1, the last two strings.
        let mut want = encode(&[32; 8]);
        want.extend(RUN_MARKER);
        want.push(2);
        for _ in 0..2 {
            want.extend(encode(&[1, 0, 2, 0, 3, 0, 200, 0]));
        }
        want.extend(encode(&[32; 8]));
        want.extend(RUN_MARKER);
        want.push(1);
        want.extend(encode(&[5, 0, 6, 0]));
        assert_eq!(out, want);
        let n = strings.len() as u64;
        let (mut r, mut pos, mut back) = (StringRunReader::default(), 0, Vec::new());
        for _ in 0..n {
            r.run(&out, &mut pos, n).expect("run");
            back.push(r.next(&out, &mut pos).expect("string"));
        }
        assert_eq!((back, pos), (strings, out.len()));
        // After one group: runs of 0 groups, and of more than the 4 strings left.
        for (count, run) in [(8, 0u8), (8, 2), (7, 1)] {
            let mut s = encode(&[1; 8]);
            s.extend(RUN_MARKER);
            s.push(run);
            let (mut r, mut pos) = (StringRunReader::default(), 0);
            for _ in 0..4 {
                r.next(&s, &mut pos).expect("first group");
            }
            assert_eq!(
                r.run(&s, &mut pos, count),
                Err(RunError::BadRun(u64::from(run)))
            );
        }
    }

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
