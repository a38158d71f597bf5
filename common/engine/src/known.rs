//! Published counts, to check every result against.
//!
//! Source: OEIS A000170 (total) and A002562 (unique), as copied into the
//! project's shared `known-counts.tsv`. N = 24..=27 are the record results of
//! NQueens@Home (corrected) and the Q27 project. N >= 28 is unknown.

/// Total and unique solution counts for one N.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Known {
    pub n: u32,
    pub total: u128,
    pub unique: u128,
}

const fn k(n: u32, total: u128, unique: u128) -> Known {
    Known { n, total, unique }
}

/// Index i holds N = i + 1.
pub const KNOWN: [Known; 27] = [
    k(1, 1, 1),
    k(2, 0, 0),
    k(3, 0, 0),
    k(4, 2, 1),
    k(5, 10, 2),
    k(6, 4, 1),
    k(7, 40, 6),
    k(8, 92, 12),
    k(9, 352, 46),
    k(10, 724, 92),
    k(11, 2_680, 341),
    k(12, 14_200, 1_787),
    k(13, 73_712, 9_233),
    k(14, 365_596, 45_752),
    k(15, 2_279_184, 285_053),
    k(16, 14_772_512, 1_846_955),
    k(17, 95_815_104, 11_977_939),
    k(18, 666_090_624, 83_263_591),
    k(19, 4_968_057_848, 621_012_754),
    k(20, 39_029_188_884, 4_878_666_808),
    k(21, 314_666_222_712, 39_333_324_973),
    k(22, 2_691_008_701_644, 336_376_244_042),
    k(23, 24_233_937_684_440, 3_029_242_658_210),
    k(24, 227_514_171_973_736, 28_439_272_956_934),
    k(25, 2_207_893_435_808_352, 275_986_683_743_434),
    k(26, 22_317_699_616_364_044, 2_789_712_466_510_289),
    k(27, 234_907_967_154_122_528, 29_363_495_934_315_694),
];

/// The published counts for `n`, if any are known.
pub fn known(n: u32) -> Option<Known> {
    let i = usize::try_from(n).ok()?.checked_sub(1)?;
    KNOWN.get(i).copied()
}

/// Whether counts equal the published ones; `None` past N=27.
pub fn matches(n: u32, total: u128, unique: u128) -> Option<bool> {
    known(n).map(|k| (k.total, k.unique) == (total, unique))
}

/// [`matches`](fn@matches) in words, for reports.
pub fn verdict(matches: Option<bool>) -> &'static str {
    match matches {
        Some(true) => "matches OEIS A000170 / A002562",
        Some(false) => "DIFFERS from OEIS A000170 / A002562",
        None => "no published value to compare with",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_indexed_by_n() {
        for (i, k) in KNOWN.iter().enumerate() {
            assert_eq!(k.n as usize, i + 1);
        }
        assert_eq!(known(0), None);
        assert_eq!(known(28), None);
        assert_eq!(known(8).unwrap().total, 92);
        assert_eq!(matches(8, 92, 12), Some(true));
        assert_eq!(matches(8, 92, 11), Some(false));
        assert_eq!(matches(28, 0, 0), None);
    }

    /// The embedded table must agree with the project's shared copy when it
    /// is beside the checkout (it is in CI and on developer machines).
    #[test]
    fn agrees_with_shared_table_when_present() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/known-counts.tsv");
        let Ok(text) = std::fs::read_to_string(path) else {
            eprintln!("{path} not found; skipping the cross-check");
            return;
        };
        let mut rows = 0;
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with('n'))
        {
            let f: Vec<&str> = line.split('\t').collect();
            let n: u32 = f[0].parse().unwrap();
            let k = known(n).expect("shared table has an N we lack");
            assert_eq!(k.total, f[1].parse::<u128>().unwrap(), "total for N={n}");
            assert_eq!(k.unique, f[2].parse::<u128>().unwrap(), "unique for N={n}");
            rows += 1;
        }
        assert_eq!(rows, KNOWN.len());
    }
}
