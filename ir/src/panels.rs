//! The panel layout of a weight: a row-major `[K, N]` `f32` matrix stored as
//! `[ceil(N / p), K, p]`, panel `j` holding columns `j*p .. j*p + p` of every row, one row of
//! `p` after the other, zeros past `N`. A product reads each panel as one contiguous run (the
//! row-major matrix's columns are `4N` bytes apart, which the cache's prefetchers do not
//! follow), as onnxruntime's prepacked and IREE's data-tiled weights do.
//!
//! The CPU lowering stores such weights packed, under [`name`]'s name, in place of the
//! original; a sidecar reader that looks for the original finds it through [`parse`] and
//! gets it back with [`unpack`].

/// The stored name of constant `constant` packed into panels of `p` columns:
/// `<constant>@panels<p>`.
pub fn name(constant: &str, p: u64) -> String {
    format!("{constant}@panels{p}")
}

/// The constant and panel width of a [`name`], or `None` for another name.
pub fn parse(stored: &str) -> Option<(&str, u64)> {
    let (constant, digits) = stored.rsplit_once("@panels")?;
    let p: u64 = digits.parse().ok()?;
    (p > 0 && p.to_string() == digits).then_some((constant, p))
}

/// The dimensions of a `[K, N]` matrix packed into panels of `p` columns:
/// `[ceil(N / p), K, p]`.
pub fn dims(k: u64, n: u64, p: u64) -> [u64; 3] {
    [n.div_ceil(p), k, p]
}

/// The bytes of a `[k, n]` `f32` matrix packed into panels of `p` columns; `None` for
/// `p = 0` or a size past `u64`.
fn packed_bytes(k: u64, n: u64, p: u64) -> Option<u64> {
    if p == 0 {
        return None;
    }
    dims(k, n, p)
        .iter()
        .try_fold(4u64, |a, &d| a.checked_mul(d))
}

/// The row-major `[k, n]` `f32` matrix `data` (little-endian bytes) packed into panels of
/// `p` columns.
pub fn pack(data: &[u8], k: u64, n: u64, p: u64) -> Vec<u8> {
    let (k, n, p) = (k as usize, n as usize, p as usize);
    let panels = n.div_ceil(p);
    let mut out = vec![0u8; panels * k * p * 4];
    for j in 0..panels {
        let cols = p.min(n - j * p);
        for r in 0..k {
            let src = (r * n + j * p) * 4;
            let dst = ((j * k + r) * p) * 4;
            out[dst..dst + cols * 4].copy_from_slice(&data[src..src + cols * 4]);
        }
    }
    out
}

/// The row-major `[k, n]` matrix that [`pack`] packed into `packed`, or `None` when
/// `packed` does not hold `[ceil(n / p), k, p]` `f32`s or its padding is not zero.
pub fn unpack(packed: &[u8], k: u64, n: u64, p: u64) -> Option<Vec<u8>> {
    if packed.len() as u64 != packed_bytes(k, n, p)? {
        return None;
    }
    let (k, n, p) = (k as usize, n as usize, p as usize);
    let mut out = vec![0u8; k * n * 4];
    for j in 0..n.div_ceil(p) {
        let cols = p.min(n - j * p);
        for r in 0..k {
            let src = ((j * k + r) * p) * 4;
            let dst = (r * n + j * p) * 4;
            out[dst..dst + cols * 4].copy_from_slice(&packed[src..src + cols * 4]);
            if packed[src + cols * 4..src + p * 4].iter().any(|&b| b != 0) {
                return None;
            }
        }
    }
    Some(out)
}

/// Whether `packed` is [`pack`] of the `[k, n]` matrix `data`, compared in place.
pub fn holds(packed: &[u8], data: &[u8], k: u64, n: u64, p: u64) -> bool {
    let sizes = packed_bytes(k, n, p).zip(k.checked_mul(n).and_then(|e| e.checked_mul(4)));
    if sizes != Some((packed.len() as u64, data.len() as u64)) {
        return false;
    }
    let (k, n, p) = (k as usize, n as usize, p as usize);
    (0..n.div_ceil(p)).all(|j| {
        let cols = p.min(n - j * p);
        (0..k).all(|r| {
            let src = ((j * k + r) * p) * 4;
            let at = (r * n + j * p) * 4;
            packed[src..src + cols * 4] == data[at..at + cols * 4]
                && packed[src + cols * 4..src + p * 4].iter().all(|&b| b == 0)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(k: usize, n: usize) -> Vec<u8> {
        (0..k * n)
            .flat_map(|i| (i as f32 + 1.0).to_le_bytes())
            .collect()
    }

    #[test]
    fn unpack_inverts_pack_with_a_partial_last_panel() {
        for (k, n, p) in [(3, 10, 4), (1, 1, 8), (5, 16, 16), (2, 7, 1)] {
            let data = matrix(k, n);
            let packed = pack(&data, k as u64, n as u64, p as u64);
            assert_eq!(
                packed.len(),
                dims(k as u64, n as u64, p as u64).iter().product::<u64>() as usize * 4
            );
            assert!(holds(&packed, &data, k as u64, n as u64, p as u64));
            assert_eq!(
                unpack(&packed, k as u64, n as u64, p as u64).as_deref(),
                Some(&data[..])
            );
        }
        // Column 9 of row 0 is the second float of panel 2's first row.
        let packed = pack(&matrix(3, 10), 3, 10, 4);
        assert_eq!(packed[(2 * 3 * 4 + 1) * 4..][..4], 10f32.to_le_bytes());
    }

    #[test]
    fn wrong_sizes_and_padding_are_refused() {
        let data = matrix(3, 10);
        let mut packed = pack(&data, 3, 10, 4);
        assert_eq!(unpack(&packed, 3, 13, 4), None);
        assert_eq!(unpack(&packed[4..], 3, 10, 4), None);
        assert_eq!(unpack(&packed, 3, 10, 0), None);
        assert!(!holds(&packed, &data, 3, 10, 5));
        let last = packed.len() - 1;
        packed[last] = 1; // padding of the last panel
        assert_eq!(unpack(&packed, 3, 10, 4), None);
        assert!(!holds(&packed, &data, 3, 10, 4));
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(name("h.0.attn.w", 48), "h.0.attn.w@panels48");
        assert_eq!(parse("h.0.attn.w@panels48"), Some(("h.0.attn.w", 48)));
        for bad in [
            "w",
            "w@panels",
            "w@panels0",
            "w@panels048",
            "w@panels4x",
            "w@panels+4",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
