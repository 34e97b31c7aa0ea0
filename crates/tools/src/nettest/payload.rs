//! Message payloads: random (incompressible, like encrypted redo) or compressible (like
//! typical redo: record headers, small integers, repeated keys, runs of zeros).

/// What the bytes of each message look like.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Payload {
    /// Uniformly random bytes: no compressor gains anything.
    Random,
    /// Redo-like records: about a third of the bytes are zeros and much of the rest
    /// repeats, so general-purpose compressors shrink it severalfold.
    Compressible,
}

/// Fills a message of `bytes` bytes; `seed` varies it between connections.
pub fn generate(payload: Payload, bytes: usize, seed: u64) -> Vec<u8> {
    let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        // xorshift64*
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let mut out = Vec::with_capacity(bytes);
    match payload {
        Payload::Random => {
            while out.len() < bytes {
                out.extend_from_slice(&next().to_le_bytes());
            }
        }
        Payload::Compressible => {
            const KEYS: [&[u8]; 4] = [b"user:", b"order:", b"session:", b"cart:"];
            while out.len() < bytes {
                let value = next();
                // A record: a 16-byte header of small numbers, a key, a value, zero padding.
                out.extend_from_slice(&((value & 0xff) as u32).to_le_bytes());
                out.extend_from_slice(&[0x01, 0x00, 0x10, 0x00]);
                out.extend_from_slice(&((value >> 8) & 0xffff).to_le_bytes());
                out.extend_from_slice(KEYS[(value >> 24) as usize % KEYS.len()]);
                out.extend_from_slice(format!("{}", (value >> 32) % 100_000).as_bytes());
                out.extend_from_slice(b"=SET value ");
                out.extend_from_slice(&[0u8; 24]);
            }
        }
    }
    out.truncate(bytes);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Order-0 entropy in bits per byte: 8 for random data, far less for redo-like data.
    fn entropy_bits_per_byte(data: &[u8]) -> f64 {
        let mut counts = [0usize; 256];
        data.iter().for_each(|&byte| counts[byte as usize] += 1);
        let total = data.len() as f64;
        counts
            .iter()
            .filter(|&&c| c > 0)
            .map(|&c| -(c as f64 / total) * (c as f64 / total).log2())
            .sum()
    }

    #[test]
    fn sizes_are_exact_and_kinds_differ() {
        for bytes in [0, 1, 7, 9400, 65536] {
            assert_eq!(generate(Payload::Random, bytes, 1).len(), bytes);
            assert_eq!(generate(Payload::Compressible, bytes, 1).len(), bytes);
        }
        let random = generate(Payload::Random, 65536, 1);
        let compressible = generate(Payload::Compressible, 65536, 1);
        assert!(entropy_bits_per_byte(&random) > 7.9);
        let entropy = entropy_bits_per_byte(&compressible);
        assert!(entropy < 5.0, "{entropy} bits per byte");
        let zeros = compressible.iter().filter(|&&byte| byte == 0).count();
        assert!(zeros * 4 > compressible.len(), "{zeros} zeros");
        assert_ne!(generate(Payload::Random, 64, 1), generate(Payload::Random, 64, 2));
    }
}
