//! The quantised product of two uint8 activations, byte for byte as ONNX Runtime's
//! `QLinearMatMul` computes it, for Smart Turn's attention products (`Q·Kᵀ` and `P·V`).
//!
//! ONNX Runtime runs each head of those products as a separate integer GEMM that writes its
//! int32 result to memory and requantises it to uint8 in a second pass. With six heads of
//! 400 × 64 × 400, that reached 50–65 G multiply-adds a second on the AMD EPYC host, against
//! 180 G for the model's weight products of the same run (docs/inference.md, *The attention
//! products on ontime's kernel*): the eight attention products were a fifth of a run. Here
//! each tile of the result stays in registers from the first multiply-add to its uint8 byte.
//! It is written by hand because what it must reproduce is ONNX Runtime's requantisation, bit
//! for bit, and no crate does that.
//!
//! What is computed, for `A` (`[…, M, K]`) and `B` (`[…, K, N]`) with the same leading
//! dimensions:
//!
//! 1. the exact integer `Σₖ (a − a₀)(b − b₀)` (`a₀`, `b₀` the zero points);
//! 2. converted to `f32` and multiplied by `a_scale · b_scale / y_scale` (evaluated in `f32`
//!    in that order, as ONNX Runtime does);
//! 3. clamped to `[−y₀, 255 − y₀]`, rounded to the nearest integer (ties to even), `+ y₀`.
//!
//! Step 1 is exact in any order, so only steps 2 and 3 could differ from ONNX Runtime's, and
//! the session compares both kernels on every chain at load (`crate::turn`) before it uses this
//! one.
//!
//! The fast path uses AVX-512 VNNI (`vpdpbusd`: unsigned × signed bytes, four at a time into
//! int32). `B` is packed as signed bytes (`b − 128`), and the constant terms go in after the
//! sum: `Σ a(b − 128) + (128 − b₀)·Σa − a₀·Σb + K·a₀·b₀` is step 1's integer. Without VNNI the
//! portable loop computes the same bytes, far slower than ONNX Runtime; the session uses the
//! kernel only where [`fast_path_available`] says so.

/// Step 2 and 3's constants for one product.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Requantisation {
    /// `A`'s zero point.
    pub a_zero: u8,
    /// `B`'s zero point.
    pub b_zero: u8,
    /// `a_scale · b_scale / y_scale`.
    pub multiplier: f32,
    /// The output's zero point.
    pub y_zero: u8,
}

impl Requantisation {
    /// From the operator's scales and zero points; the multiplier as ONNX Runtime evaluates it.
    pub fn new(
        a_scale: f32,
        a_zero: u8,
        b_scale: f32,
        b_zero: u8,
        y_scale: f32,
        y_zero: u8,
    ) -> Self {
        Self {
            a_zero,
            b_zero,
            multiplier: a_scale * b_scale / y_scale,
            y_zero,
        }
    }

    /// Steps 2 and 3 for one exact integer sum.
    pub fn byte(&self, sum: i32) -> u8 {
        let low = -f32::from(self.y_zero);
        let high = 255.0 - f32::from(self.y_zero);
        let scaled = (sum as f32 * self.multiplier).max(low).min(high);
        // In range by the clamp: 0..=255 once the zero point is back.
        (scaled.round_ties_even() as i32 + i32::from(self.y_zero)) as u8
    }
}

/// The dimensions of one product: `batch` independent `[m, k] × [k, n]` products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    /// Products (heads).
    pub batch: usize,
    /// Rows of `A` and of the result.
    pub m: usize,
    /// Columns of `A`, rows of `B`.
    pub k: usize,
    /// Columns of `B` and of the result.
    pub n: usize,
}

impl Dims {
    /// From the two operands' shapes (`[…, m, k]` and `[…, k, n]`, the same leading
    /// dimensions); `None` for anything else.
    pub fn of(a: &[i64], b: &[i64]) -> Option<Self> {
        let ([a_lead @ .., m, k], [b_lead @ .., k2, n]) = (a, b) else {
            return None;
        };
        if a_lead != b_lead || k != k2 {
            return None;
        }
        let size = |d: i64| usize::try_from(d).ok();
        let mut batch = 1usize;
        for &d in a_lead {
            batch = batch.checked_mul(size(d)?)?;
        }
        Some(Self {
            batch,
            m: size(*m)?,
            k: size(*k)?,
            n: size(*n)?,
        })
    }

    fn lengths(&self) -> Option<(usize, usize, usize)> {
        let a = self.batch.checked_mul(self.m)?.checked_mul(self.k)?;
        let b = self.batch.checked_mul(self.k)?.checked_mul(self.n)?;
        let y = self.batch.checked_mul(self.m)?.checked_mul(self.n)?;
        Some((a, b, y))
    }
}

/// Whether this CPU runs the fast path (AVX-512 with VNNI).
pub fn fast_path_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        vnni::available()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The kernel, with the buffers it reuses from one product to the next.
#[derive(Debug, Default)]
pub struct QuantisedMatMul {
    packed: Vec<u8>,
    row_terms: Vec<i32>,
    column_terms: Vec<i32>,
    /// Use the portable loop even where the fast path runs (tests compare the two).
    portable_only: bool,
}

impl QuantisedMatMul {
    /// A kernel that takes the fast path where the CPU has it.
    pub fn new() -> Self {
        Self::default()
    }

    /// A kernel that always takes the portable loop.
    pub fn portable() -> Self {
        Self {
            portable_only: true,
            ..Self::default()
        }
    }

    /// `y = requantised(A · B)`; false (and `y` untouched) if the lengths do not match `dims`.
    pub fn run(
        &mut self,
        a: &[u8],
        b: &[u8],
        dims: Dims,
        rq: &Requantisation,
        y: &mut [u8],
    ) -> bool {
        let Some((a_len, b_len, y_len)) = dims.lengths() else {
            return false;
        };
        if a.len() != a_len || b.len() != b_len || y.len() != y_len {
            return false;
        }
        let Dims { m, k, n, .. } = dims;
        if m == 0 || n == 0 {
            return true;
        }
        if k == 0 {
            // Empty sums: every byte is the requantised zero.
            y.fill(rq.byte(0));
            return true;
        }
        #[cfg(target_arch = "x86_64")]
        if !self.portable_only && k % 4 == 0 && vnni::available() {
            // Sized once for every head: `prepare` overwrites every value but the padding,
            // which stays zero.
            self.size(dims);
            for ((a, b), y) in a
                .chunks_exact(m * k)
                .zip(b.chunks_exact(k * n))
                .zip(y.chunks_exact_mut(m * n))
            {
                // SAFETY: the CPU has the features (checked above); `a`, `b`, the buffers and
                // `y` have the lengths `dims` asks for (checked above and sized by `size`), and
                // `k` is a multiple of four.
                #[allow(unsafe_code)]
                unsafe {
                    vnni::prepare(
                        a,
                        b,
                        dims,
                        rq,
                        &mut self.packed,
                        &mut self.row_terms,
                        &mut self.column_terms,
                    );
                    vnni::product(&vnni::Operands {
                        a,
                        packed: &self.packed,
                        row_terms: &self.row_terms,
                        column_terms: &self.column_terms,
                        m,
                        k,
                        n,
                        rq,
                        y: y.as_mut_ptr(),
                    })
                };
            }
            return true;
        }
        portable(a, b, dims, rq, y);
        true
    }

    /// The buffers' lengths for one head of `dims`: `B` packed as signed bytes, four rows to a
    /// 32-bit lane, sixteen columns to a block (`[n/16][k/4][16][4]`, zero-padded), a constant
    /// term per row of `A` and per column of `B` (a whole number of blocks).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn size(&mut self, dims: Dims) {
        let blocks = dims.n.div_ceil(16);
        self.packed.clear();
        self.packed.resize(blocks * (dims.k / 4) * 64, 0);
        self.column_terms.clear();
        self.column_terms.resize(blocks * 16, 0);
        self.row_terms.clear();
        self.row_terms.resize(dims.m, 0);
    }
}

/// The same bytes, one sum at a time.
fn portable(a: &[u8], b: &[u8], dims: Dims, rq: &Requantisation, y: &mut [u8]) {
    let Dims { m, k, n, .. } = dims;
    let (a0, b0) = (i32::from(rq.a_zero), i32::from(rq.b_zero));
    for ((a, b), y) in a
        .chunks_exact(m * k)
        .zip(b.chunks_exact(k * n))
        .zip(y.chunks_exact_mut(m * n))
    {
        for (row, out) in a.chunks_exact(k).zip(y.chunks_exact_mut(n)) {
            for (j, o) in out.iter_mut().enumerate() {
                let sum: i32 = row
                    .iter()
                    .enumerate()
                    .map(|(kk, &v)| (i32::from(v) - a0) * (i32::from(b[kk * n + j]) - b0))
                    .sum();
                *o = rq.byte(sum);
            }
        }
    }
}

// The one place this crate uses CPU intrinsics: `std::simd` is not stable, and the compiler
// does not turn the portable loop into `vpdpbusd`.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod vnni {
    use std::arch::x86_64::*;

    use super::Requantisation;

    pub(super) fn available() -> bool {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512vnni")
    }

    /// One head's operands, prepared (`QuantisedMatMul::prepare`).
    pub(super) struct Operands<'a> {
        pub a: &'a [u8],
        pub packed: &'a [u8],
        pub row_terms: &'a [i32],
        pub column_terms: &'a [i32],
        pub m: usize,
        pub k: usize,
        pub n: usize,
        pub rq: &'a Requantisation,
        pub y: *mut u8,
    }

    /// Packs one head's `B` (`k × n`) for [`product`] (`b − 128` as signed bytes,
    /// `[n/16][k/4][16][4]`), and the sums' constant terms: per row of `A`,
    /// `(128 − b₀)·Σa`; per column of `B`, `K·a₀·b₀ − a₀·Σb`.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW, VL and VNNI; `a` holds at least `m × k` bytes and `b`
    /// `k × n`, `k` is a multiple of four, and the buffers have the lengths
    /// `QuantisedMatMul::size` gives them.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(super) unsafe fn prepare(
        a: &[u8],
        b: &[u8],
        dims: super::Dims,
        rq: &Requantisation,
        packed: &mut [u8],
        row_terms: &mut [i32],
        column_terms: &mut [i32],
    ) {
        let super::Dims { m, k, n, .. } = dims;
        let quads = k / 4;
        let full_blocks = n / 16;
        let flip = _mm_set1_epi8(i8::MIN);
        let b_ptr = b.as_ptr();
        for block in 0..full_blocks {
            let mut sums = _mm512_setzero_si512();
            for q in 0..quads {
                // Four rows' sixteen columns, transposed to sixteen columns' four rows.
                let row =
                    |r: usize| _mm_loadu_si128(b_ptr.add((q * 4 + r) * n + block * 16).cast());
                let (r0, r1, r2, r3) = (row(0), row(1), row(2), row(3));
                for r in [r0, r1, r2, r3] {
                    sums = _mm512_add_epi32(sums, _mm512_cvtepu8_epi32(r));
                }
                let (t0, t1) = (_mm_unpacklo_epi8(r0, r1), _mm_unpackhi_epi8(r0, r1));
                let (t2, t3) = (_mm_unpacklo_epi8(r2, r3), _mm_unpackhi_epi8(r2, r3));
                let out = packed.as_mut_ptr().add((block * quads + q) * 64);
                for (i, v) in [
                    _mm_unpacklo_epi16(t0, t2),
                    _mm_unpackhi_epi16(t0, t2),
                    _mm_unpacklo_epi16(t1, t3),
                    _mm_unpackhi_epi16(t1, t3),
                ]
                .into_iter()
                .enumerate()
                {
                    _mm_storeu_si128(out.add(i * 16).cast(), _mm_xor_si128(v, flip));
                }
            }
            _mm512_storeu_si512(column_terms.as_mut_ptr().add(block * 16).cast(), sums);
        }
        // The last, partial block's columns one byte at a time (its padding stays zero).
        for j in full_blocks * 16..n {
            let mut sum = 0i32;
            for kk in 0..k {
                let v = *b_ptr.add(kk * n + j);
                sum += i32::from(v);
                packed[((j / 16) * quads + kk / 4) * 64 + (j % 16) * 4 + kk % 4] = v ^ 0x80;
            }
            column_terms[j] = sum;
        }
        let a_zero = i32::from(rq.a_zero);
        let constant = k as i32 * a_zero * i32::from(rq.b_zero);
        for t in &mut column_terms[..n] {
            *t = constant - a_zero * *t;
        }
        // Row sums of `A`: byte sums of 64 at a time, the row's tail masked.
        let row_factor = 128 - i32::from(rq.b_zero);
        let zero = _mm512_setzero_si512();
        for (i, term) in row_terms.iter_mut().enumerate().take(m) {
            let row = a.as_ptr().add(i * k);
            let mut sums = _mm512_setzero_si512();
            let mut at = 0;
            while at + 64 <= k {
                let v = _mm512_loadu_si512(row.add(at).cast());
                sums = _mm512_add_epi64(sums, _mm512_sad_epu8(v, zero));
                at += 64;
            }
            if at < k {
                let mask: __mmask64 = (1u64 << (k - at)) - 1;
                let v = _mm512_maskz_loadu_epi8(mask, row.add(at).cast());
                sums = _mm512_add_epi64(sums, _mm512_sad_epu8(v, zero));
            }
            *term = row_factor * _mm512_reduce_add_epi64(sums) as i32;
        }
    }

    /// Rows of a tile: eight rows by two column blocks keep 16 accumulators, two `B` vectors
    /// and a broadcast in the 32 vector registers.
    const ROWS: usize = 8;

    /// # Safety
    /// The CPU has AVX-512 F, BW, VL and VNNI; `a` is `m × k` with `k` a multiple of four,
    /// `packed` and `column_terms` are `prepare`'s for `k × n`, `row_terms` has `m` values and
    /// `y` points to `m × n` writable bytes.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(super) unsafe fn product(o: &Operands) {
        let blocks = o.n.div_ceil(16);
        let mut i = 0;
        while i + ROWS <= o.m {
            let mut block = 0;
            while block + 2 <= blocks {
                tile::<ROWS, 2>(o, i, block);
                block += 2;
            }
            if block < blocks {
                tile::<ROWS, 1>(o, i, block);
            }
            i += ROWS;
        }
        while i < o.m {
            let mut block = 0;
            while block + 2 <= blocks {
                tile::<1, 2>(o, i, block);
                block += 2;
            }
            if block < blocks {
                tile::<1, 1>(o, i, block);
            }
            i += 1;
        }
    }

    /// Rows `i..i + R` by column blocks `block..block + C`, from the first multiply-add to
    /// the stored bytes.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn tile<const R: usize, const C: usize>(o: &Operands, i: usize, block: usize) {
        let quads = o.k / 4;
        let mut acc = [[_mm512_setzero_si512(); C]; R];
        let a = o.a.as_ptr();
        let packed = o.packed.as_ptr();
        for q in 0..quads {
            let mut b = [_mm512_setzero_si512(); C];
            for (c, v) in b.iter_mut().enumerate() {
                *v = _mm512_loadu_si512(packed.add(((block + c) * quads + q) * 64).cast());
            }
            for (r, row) in acc.iter_mut().enumerate() {
                let four = a.add((i + r) * o.k + q * 4).cast::<i32>().read_unaligned();
                let broadcast = _mm512_set1_epi32(four);
                for (c, v) in row.iter_mut().enumerate() {
                    *v = _mm512_dpbusd_epi32(*v, broadcast, b[c]);
                }
            }
        }
        let multiplier = _mm512_set1_ps(o.rq.multiplier);
        let low = _mm512_set1_ps(-f32::from(o.rq.y_zero));
        let high = _mm512_set1_ps(255.0 - f32::from(o.rq.y_zero));
        let y_zero = _mm512_set1_epi32(i32::from(o.rq.y_zero));
        for (r, row) in acc.iter().enumerate() {
            let row_term = _mm512_set1_epi32(o.row_terms[i + r]);
            for (c, v) in row.iter().enumerate() {
                let j = (block + c) * 16;
                let column_term = _mm512_loadu_si512(o.column_terms.as_ptr().add(j).cast());
                let sum = _mm512_add_epi32(_mm512_add_epi32(*v, row_term), column_term);
                // MXCSR's default rounding (to nearest, ties to even) in the conversion.
                let scaled = _mm512_mul_ps(_mm512_cvtepi32_ps(sum), multiplier);
                let clamped = _mm512_min_ps(_mm512_max_ps(scaled, low), high);
                let bytes =
                    _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(clamped), y_zero));
                let columns = (o.n - j).min(16);
                let mask: __mmask16 = if columns == 16 {
                    u16::MAX
                } else {
                    (1u16 << columns) - 1
                };
                _mm_mask_storeu_epi8(o.y.add((i + r) * o.n + j).cast(), mask, bytes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(seed: u64) -> impl FnMut() -> u8 {
        let mut s = seed;
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        }
    }

    fn reference(a: &[u8], b: &[u8], d: Dims, rq: &Requantisation) -> Vec<u8> {
        let mut y = vec![0u8; d.batch * d.m * d.n];
        for h in 0..d.batch {
            for i in 0..d.m {
                for j in 0..d.n {
                    let mut sum = 0i64;
                    for kk in 0..d.k {
                        let av = i64::from(a[(h * d.m + i) * d.k + kk]) - i64::from(rq.a_zero);
                        let bv = i64::from(b[(h * d.k + kk) * d.n + j]) - i64::from(rq.b_zero);
                        sum += av * bv;
                    }
                    y[(h * d.m + i) * d.n + j] = rq.byte(i32::try_from(sum).expect("ok: small"));
                }
            }
        }
        y
    }

    #[test]
    fn both_paths_give_the_reference_bytes_on_every_shape() {
        let mut next = stream(7);
        let shapes = [
            (6, 40, 64, 40),
            (2, 9, 400, 64),
            (1, 17, 12, 33),
            (3, 8, 4, 16),
            (1, 1, 8, 1),
            (2, 7, 5, 3),
            (2, 3, 0, 5),
            (0, 3, 4, 5),
        ];
        for (batch, m, k, n) in shapes {
            let d = Dims { batch, m, k, n };
            let a: Vec<u8> = (0..batch * m * k).map(|_| next()).collect();
            let b: Vec<u8> = (0..batch * k * n).map(|_| next()).collect();
            let rq = Requantisation::new(0.0239, next(), 0.0499, next(), 0.9, next());
            let want = reference(&a, &b, d, &rq);
            for mut kernel in [QuantisedMatMul::new(), QuantisedMatMul::portable()] {
                let mut y = vec![0u8; want.len()];
                assert!(kernel.run(&a, &b, d, &rq, &mut y));
                assert_eq!(y, want, "shape {d:?}");
            }
        }
    }

    #[test]
    fn saturated_sums_clamp_at_both_ends() {
        let d = Dims {
            batch: 1,
            m: 2,
            k: 8,
            n: 16,
        };
        let a = [[255u8; 8], [0u8; 8]].concat();
        let b = vec![255u8; 8 * 16];
        let rq = Requantisation::new(1.0, 0, 1.0, 128, 0.01, 10);
        let mut y = vec![0u8; 32];
        assert!(QuantisedMatMul::new().run(&a, &b, d, &rq, &mut y));
        assert_eq!(&y[..16], &[255u8; 16]);
        assert_eq!(&y[16..], &[10u8; 16]);
        let rq = Requantisation::new(1.0, 0, 1.0, 255, 0.01, 10);
        let b = vec![0u8; 8 * 16];
        assert!(QuantisedMatMul::new().run(&a, &b, d, &rq, &mut y));
        assert_eq!(&y[..16], &[0u8; 16]);
    }

    #[test]
    fn ties_round_to_even() {
        let rq = Requantisation::new(0.5, 0, 1.0, 0, 1.0, 100);
        assert_eq!(rq.byte(1), 100);
        assert_eq!(rq.byte(3), 102);
        assert_eq!(rq.byte(-1), 100);
        assert_eq!(rq.byte(-3), 98);
    }

    #[test]
    fn mismatched_lengths_and_shapes_are_refused() {
        let d = Dims {
            batch: 1,
            m: 2,
            k: 4,
            n: 3,
        };
        let rq = Requantisation::new(1.0, 0, 1.0, 0, 1.0, 0);
        let mut y = vec![7u8; 6];
        assert!(!QuantisedMatMul::new().run(&[0; 7], &[0; 12], d, &rq, &mut y));
        assert_eq!(y, vec![7u8; 6]);
        assert_eq!(
            Dims::of(&[1, 6, 400, 64], &[1, 6, 64, 400]),
            Some(Dims {
                batch: 6,
                m: 400,
                k: 64,
                n: 400
            })
        );
        assert_eq!(Dims::of(&[1, 6, 400, 64], &[1, 6, 63, 400]), None);
        assert_eq!(Dims::of(&[2, 400, 64], &[1, 64, 400]), None);
        assert_eq!(Dims::of(&[64], &[64, 400]), None);
        assert_eq!(Dims::of(&[1, -1, 4], &[1, 4, 4]), None);
    }
}
