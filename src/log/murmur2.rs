//! Kafka's default partitioner for keyed records: murmur2 of the key bytes
//! (Kafka's variant, seed 0x9747b28c), sign bit cleared, modulo the
//! partition count. The Kafka log chooses partitions with it itself, so that
//! the engine knows where a record will land before the broker answers, and
//! so that a key lands where the Java client and librdkafka's
//! `murmur2_random` would put it.

/// Kafka's murmur2 hash of `data`.
pub fn hash(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, b) in tail.iter().enumerate().rev() {
            h ^= (*b as u32) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// The partition of `key` among `partitions` (0 when there are none).
pub fn partition(key: &[u8], partitions: u32) -> u32 {
    (hash(key) & 0x7fff_ffff) % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Kafka's own test vectors are checked against the Java client's
    // placement in tests/log_contract.rs.
    #[test]
    fn partitions_as_librdkafka_does() {
        // Every key length mod 4, and keys shaped like chain roots.
        for n in [1u32, 3, 4, 7, 12] {
            for i in 0..500 {
                let key = format!("run-{i}{}", "x".repeat(i % 5));
                // SAFETY: librdkafka's murmur2 partitioner reads only the key
                // and the partition count; the topic and opaques are unused.
                let theirs = unsafe {
                    rdkafka::bindings::rd_kafka_msg_partitioner_murmur2(
                        std::ptr::null(),
                        key.as_ptr().cast(),
                        key.len(),
                        n as i32,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                    )
                };
                assert_eq!(
                    partition(key.as_bytes(), n) as i32,
                    theirs,
                    "{key} over {n}"
                );
            }
        }
    }
}
