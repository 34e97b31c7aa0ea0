//! SplitMix64: a tiny, seedable generator for loss and jitter decisions (not for secrets).

#[derive(Debug, Clone)]
pub(crate) struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_deterministic_and_roughly_uniform() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        let mut below_half = 0;
        for _ in 0..10_000 {
            let value = a.next_u64();
            assert_eq!(value, b.next_u64());
            if value < u64::MAX / 2 {
                below_half += 1;
            }
        }
        assert!((4_700..5_300).contains(&below_half), "{below_half} of 10000 below half");
    }
}
