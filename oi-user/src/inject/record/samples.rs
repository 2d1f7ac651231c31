//! The tracer's side of sampling: the draws it writes into the data part before any wrapper
//! runs ([`draws`]), the weight of a sampled allocation ([`weight`]), and the bounded reading
//! of the sample ring ([`Drain`]).
//!
//! The ring is target-writable: a record is believed only when its `seq` is the number the
//! tracer expects both before and after the copy (a writer stores 0 first and the number
//! last, so a record rewritten meanwhile shows another `seq`), its stack length is at most
//! the window, and its thread index names a slot. Records the writers went past before they
//! were read are counted in [`Drain::dropped`], never guessed. Never panics.

use oi_common::inject::{
    DRAWS, RECORD_HEADER, RECORD_SIZE, SAMPLED_BIT, STACK_WINDOW, offset, sample_mode,
};

use super::{RecordError, Result};

/// The draws for `mode` of mean `period` (bytes or calls), in an order from `seed`: for
/// [`sample_mode::BYTES`], the [`DRAWS`] quantiles of the exponential distribution of that
/// mean (each at least 1), shuffled, and scaled so that their mean is `period` exactly: the
/// threads cycle through this table, so its mean is the sampling's mean, which a table of
/// independent draws would miss by a few per cent (its standard error, 1/√1024) and bias every
/// estimate by as much. For [`sample_mode::CALLS`], `period` itself.
pub fn draws(mode: u64, period: u64, seed: u64) -> Vec<u64> {
    if mode == sample_mode::CALLS {
        return vec![period.max(1); DRAWS as usize];
    }
    let n = DRAWS as usize;
    let quantiles: Vec<f64> = (0..n)
        .map(|i| -((1.0 - (i as f64 + 0.5) / n as f64).ln()))
        .collect();
    let scale = period as f64 * n as f64 / quantiles.iter().sum::<f64>();
    let mut out: Vec<u64> = quantiles
        .iter()
        .map(|q| ((q * scale).round() as u64).clamp(1, i64::MAX as u64))
        .collect();
    // Fisher–Yates with splitmix64.
    let mut state = seed;
    for i in (1..n).rev() {
        let j = (splitmix64(&mut state) % (i as u64 + 1)) as usize;
        out.swap(i, j);
    }
    out
}

/// The draws' bytes, little-endian words, as the data part holds them at `draws_offset`.
pub fn draws_bytes(draws: &[u64]) -> Vec<u8> {
    draws.iter().flat_map(|d| d.to_le_bytes()).collect()
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What a sampled allocation of `size` bytes stands for: (allocations, bytes). Sampling by
/// bytes with mean B takes it with probability p = 1 − exp(−size / B), so it stands for 1/p
/// allocations and size/p bytes (Horvitz–Thompson: unbiased); every Nth call, for N of each.
pub fn weight(mode: u64, period: u64, size: u64) -> (f64, f64) {
    match mode {
        sample_mode::CALLS => (period as f64, period as f64 * size as f64),
        _ => {
            let p = -(-(size.max(1) as f64) / period.max(1) as f64).exp_m1();
            (1.0 / p, size as f64 / p)
        }
    }
}

/// One sampled allocation as its record said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub addr: u64,
    pub size: u64,
    pub usable: u64,
    pub tsc: u64,
    pub thread: u64,
    /// The allocator's caller: its pc (the return address), stack pointer and rbp.
    pub pc: u64,
    pub sp: u64,
    pub bp: u64,
    /// The caller's stack from `sp` up.
    pub stack: Vec<u8>,
}

/// The tracer's position in the ring and what it could not read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drain {
    /// The number of the next record to read.
    pub next: u64,
    /// Records overwritten before they were read (the ring was full), or rewritten while read.
    pub dropped: u64,
    /// Records whose fields could not be right (a stack length beyond the window, a thread
    /// slot out of range): not believed.
    pub bad: u64,
}

impl Drain {
    /// Reads every record written since the last call from `data` (the data part, live: the
    /// target may be writing it) into `out`. A record still being written stays for the next
    /// call, unless the writers have gone a whole ring past it. The header must be one
    /// `Snapshot::read` accepted.
    pub fn read(&mut self, data: &[u8], out: &mut Vec<Sample>) -> Result<()> {
        let word = |at: u64| read_word(data, at);
        let ring_offset = word(offset::RING_OFFSET)?;
        let mask = word(offset::RING_MASK)?;
        let slots = word(offset::SLOTS)?;
        let entries = mask.wrapping_add(1);
        if !entries.is_power_of_two()
            || ring_offset
                .checked_add(entries.saturating_mul(RECORD_SIZE))
                .is_none_or(|end| end > data.len() as u64)
        {
            return Err(RecordError::Snapshot(format!(
                "a sample ring of {entries} records at {ring_offset:#x} does not fit its {} bytes",
                data.len()
            )));
        }
        let head = word(offset::RING_HEAD)?;
        if head < self.next {
            // Never so from the wrappers (the head only grows): nothing believable to read.
            return Ok(());
        }
        if head.wrapping_sub(self.next) > entries {
            let first = head - entries;
            self.dropped += first.saturating_sub(self.next);
            self.next = first;
        }
        while self.next < head {
            let at = ring_offset + (self.next & mask) * RECORD_SIZE;
            let expected = self.next + 1;
            let seq = word(at + offset::record::SEQ)?;
            if seq != expected {
                if seq == 0 || seq < expected {
                    // Claimed and not written yet: wait, unless the ring went past it.
                    if head - self.next < entries {
                        break;
                    }
                }
                self.dropped += 1;
                self.next += 1;
                continue;
            }
            let field = |o: u64| word(at + o);
            let stack_len = field(offset::record::STACK_LEN)?;
            let thread = field(offset::record::THREAD)?;
            let sample =
                (stack_len <= STACK_WINDOW && thread < slots).then(|| -> Result<Sample> {
                    let start = (at + RECORD_HEADER) as usize;
                    Ok(Sample {
                        addr: field(offset::record::ADDR)?,
                        size: field(offset::record::SIZE)?,
                        usable: field(offset::record::USABLE)?,
                        tsc: field(offset::record::TSC)?,
                        thread,
                        pc: field(offset::record::PC)?,
                        sp: field(offset::record::SP)?,
                        bp: field(offset::record::BP)?,
                        stack: data[start..start + stack_len as usize].to_vec(),
                    })
                });
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            if word(at + offset::record::SEQ)? != expected {
                self.dropped += 1;
            } else {
                match sample {
                    Some(s) => out.push(s?),
                    None => self.bad += 1,
                }
            }
            self.next += 1;
        }
        Ok(())
    }
}

/// Whether a live block's `thread` word says it was sampled, and its slot index.
pub fn sampled_thread(thread: u64) -> (bool, u64) {
    (thread >> SAMPLED_BIT & 1 != 0, thread & !(1 << SAMPLED_BIT))
}

/// The aligned word at `at`, read once (the target may be writing it).
fn read_word(data: &[u8], at: u64) -> Result<u64> {
    let start = usize::try_from(at).ok().filter(|s| s.is_multiple_of(8));
    match start.filter(|s| s.checked_add(8).is_some_and(|end| end <= data.len())) {
        // SAFETY: 8 bytes in bounds (checked), read as a byte array (no alignment needed),
        // volatile so that two reads of a word the target writes are two reads.
        Some(s) => Ok(u64::from_le_bytes(unsafe {
            std::ptr::read_volatile(data.as_ptr().add(s).cast::<[u8; 8]>())
        })),
        None => Err(RecordError::Snapshot(format!(
            "word at {at:#x} beyond its {} bytes",
            data.len()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_draws_have_the_mean_and_calls_are_constant() {
        let period = 1u64 << 19;
        let d = draws(sample_mode::BYTES, period, 7);
        assert_eq!(d.len(), DRAWS as usize);
        let mean = d.iter().sum::<u64>() as f64 / d.len() as f64;
        assert!((mean / period as f64 - 1.0).abs() < 1e-6, "{mean}");
        // Exponential: the median is ln 2 of the mean.
        let mut sorted = d.clone();
        sorted.sort();
        let median = sorted[d.len() / 2] as f64 / period as f64;
        assert!((median - std::f64::consts::LN_2).abs() < 0.01, "{median}");
        assert_eq!(
            d,
            draws(sample_mode::BYTES, period, 7),
            "a seed gives one order"
        );
        assert_ne!(d, draws(sample_mode::BYTES, period, 8));
        assert!(draws(sample_mode::CALLS, 10, 1).iter().all(|&n| n == 10));
    }

    #[test]
    fn weights_are_inverse_probabilities() {
        assert_eq!(weight(sample_mode::CALLS, 10, 64), (10.0, 640.0));
        let (n, b) = weight(sample_mode::BYTES, 1 << 19, 64);
        let p = 1.0 - (-64.0f64 / f64::from(1 << 19)).exp();
        assert!((n - 1.0 / p).abs() < 1e-6 && (b - 64.0 / p).abs() < 1e-3);
        // A block far above the mean is always taken and stands for itself.
        let (n, b) = weight(sample_mode::BYTES, 4096, 1 << 30);
        assert!((n - 1.0).abs() < 1e-9 && (b - f64::from(1 << 30)).abs() < 1e-3);
    }

    #[test]
    fn sampled_bit_is_split_off() {
        assert_eq!(sampled_thread(3), (false, 3));
        assert_eq!(sampled_thread(3 | 1 << 63), (true, 3));
    }
}
