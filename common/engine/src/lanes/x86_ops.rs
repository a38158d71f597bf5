//! The small vector helpers both kernels use (8 lanes of 32 bits), built
//! into each kernel module for its own target features.
//!
//! Both kernels step two groups of lanes in a loop that calls out of line,
//! between steps, to refill lanes. Every vector live across such a call
//! must be saved (a call keeps no vector register), and the compiler then
//! keeps the groups in memory for good, stored and reloaded every step
//! (N=16 took 0.44 s instead of 0.37 s on a Zen 4). So the loop stores its
//! groups with [`lanes`] before the call and loads them after it through
//! [`opaque`].

/// Defines `load`, `lanes`, `opaque`, `bits`, `pick` and `FLUSH_EVERY` for
/// the target features `$features` in the module that invokes it.
macro_rules! ops {
    ($features:literal) => {
        const OP_LANES: usize = 8;

        /// Lane counters are added into the sums this often (in steps): a
        /// lane counts nodes in its low 16 bits (at most 2 a step) and
        /// completions in its high 16 bits (at most 1 a step), so neither
        /// can carry over.
        const FLUSH_EVERY: u32 = 1 << 14;

        #[inline]
        #[target_feature(enable = $features)]
        fn load(a: &[u32; OP_LANES]) -> __m256i {
            // SAFETY: reads exactly 32 bytes from a 32-byte array.
            unsafe { _mm256_loadu_si256(a.as_ptr().cast()) }
        }

        /// The lanes of `v` as an array: no call (unlike building an
        /// array and storing into it, which may call `Default`).
        #[inline]
        #[target_feature(enable = $features)]
        fn lanes(v: __m256i) -> [u32; OP_LANES] {
            // SAFETY: a vector of eight 32-bit lanes is eight u32s.
            unsafe { core::mem::transmute::<__m256i, [u32; OP_LANES]>(v) }
        }

        /// `v`, which the compiler can no longer tell was loaded from
        /// memory (so it cannot decide to keep it there).
        #[inline]
        #[target_feature(enable = $features)]
        fn opaque(mut v: __m256i) -> __m256i {
            // SAFETY: an empty instruction sequence on a register: it reads
            // and changes nothing.
            unsafe {
                core::arch::asm!(
                    "/* {0} */",
                    inout(ymm_reg) v,
                    options(pure, nomem, nostack, preserves_flags)
                );
            }
            v
        }

        /// Lanes set in a mask vector, as bits.
        #[inline]
        #[target_feature(enable = $features)]
        fn bits(m: __m256i) -> u32 {
            _mm256_movemask_ps(_mm256_castsi256_ps(m)) as u32
        }

        /// `if m { a } else { b }` per lane (`m` all ones or all zeros
        /// per lane). A 32-bit select, not a byte one: the AVX-512 build
        /// turns a byte select into a mask move and a masked byte move
        /// (N=16 on a Zen 4: 0.446 s, against 0.416 s with this).
        #[inline]
        #[target_feature(enable = $features)]
        fn pick(m: __m256i, a: __m256i, b: __m256i) -> __m256i {
            _mm256_castps_si256(_mm256_blendv_ps(
                _mm256_castsi256_ps(b),
                _mm256_castsi256_ps(a),
                _mm256_castsi256_ps(m),
            ))
        }
    };
}

/// Defines a kernel's lane state: `Group`, one vector per field (eight
/// lanes, one search each), and `Spill`, the same fields as arrays, with
/// `Group::spill` and `Group::reload` between them (see the module
/// documentation for why both exist). Invoke after [`ops`], with the
/// kernel's target features and its fields, each with its documentation.
macro_rules! group {
    ($features:literal; $($(#[$doc:meta])* $field:ident),* $(,)?) => {
        /// Eight lanes, one search each: vectors only, so that the loop
        /// that steps them keeps them in registers.
        #[derive(Clone, Copy)]
        struct Group {
            $($(#[$doc])* $field: __m256i,)*
        }

        /// A group's lanes in memory, between steps.
        #[derive(Default)]
        struct Spill {
            $($field: [u32; OP_LANES],)*
        }

        impl Group {
            /// The group in memory, with no call while its vectors are live.
            #[inline]
            #[target_feature(enable = $features)]
            fn spill(&self) -> Spill {
                Spill {
                    $($field: lanes(self.$field),)*
                }
            }

            /// The group stored in `s`, in registers.
            #[inline]
            #[target_feature(enable = $features)]
            fn reload(s: &Spill) -> Group {
                Group {
                    $($field: opaque(load(&s.$field)),)*
                }
            }
        }
    };
}

/// The two builds of a kernel: `$kernel!` is the kernel's source, taking
/// the target features it is compiled for.
macro_rules! builds {
    ($kernel:ident) => {
        /// Built for AVX2: any x86-64 CPU since 2013.
        pub(super) mod avx2 {
            $kernel!("avx2");
        }

        /// The same kernel built for AVX-512 (F, VL, BW, DQ): the same
        /// 256-bit vectors, but 32 registers instead of 16 (no spills),
        /// one-instruction rotates, three-input logic and mask registers.
        pub(super) mod avx512 {
            $kernel!("avx2,avx512f,avx512vl,avx512bw,avx512dq");
        }
    };
}

pub(super) use {builds, group, ops};
