//! The statistics P10 judges with: Pearson's chi-square test of a
//! contingency table, Kendall's rank correlation (exact for small samples,
//! normal beyond), and the one-sided two-sample tests of the sibling checks.
//! Written out here (a few well-known formulas) rather than pulled in as a
//! dependency; each is tested against known values.

use std::collections::HashMap;

/// ln Γ(x) for x > 0 (Lanczos, g = 7, 9 coefficients; relative error < 1e-13).
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection.
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// The regularized upper incomplete gamma function Q(a, x): the series
/// below `a + 1`, the continued fraction (modified Lentz) above.
fn gamma_q(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    let log_front = a * x.ln() - x - ln_gamma(a);
    if x < a + 1.0 {
        let (mut sum, mut term, mut n) = (1.0 / a, 1.0 / a, a);
        for _ in 0..10_000 {
            n += 1.0;
            term *= x / n;
            sum += term;
            if term.abs() < sum.abs() * 1e-16 {
                break;
            }
        }
        (1.0 - sum * log_front.exp()).clamp(0.0, 1.0)
    } else {
        let tiny = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / tiny;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..10_000 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < tiny {
                d = tiny;
            }
            c = b + an / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            let delta = d * c;
            h *= delta;
            if (delta - 1.0).abs() < 1e-16 {
                break;
            }
        }
        (log_front.exp() * h).clamp(0.0, 1.0)
    }
}

/// P(X ≥ `stat`) for X chi-square with `df` degrees of freedom.
pub fn chi_square_sf(stat: f64, df: f64) -> f64 {
    gamma_q(df / 2.0, stat / 2.0)
}

/// The complementary error function (Chebyshev fit; relative error < 1.2e-7).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// P(Z ≥ z) for a standard normal Z.
pub fn normal_sf(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// The z with P(Z ≥ z) = `p` (bisection; for bounds shown to people).
pub fn normal_isf(p: f64) -> f64 {
    let (mut lo, mut hi) = (-40.0, 40.0);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if normal_sf(mid) > p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

/// Pearson's chi-square test of independence of a table's rows (groups)
/// and columns (symbols): the statistic, its degrees of freedom and its
/// p-value. Columns whose expected count is below 5 in some row are pooled
/// into one (and that one dropped if still too small), so the chi-square
/// approximation holds; `None` when fewer than two rows or columns remain
/// (a position with one symbol everywhere has nothing to compare).
pub fn chi_square_independence(rows: &[HashMap<char, u64>]) -> Option<(f64, usize, f64)> {
    let rows: Vec<&HashMap<char, u64>> = rows
        .iter()
        .filter(|r| r.values().sum::<u64>() > 0)
        .collect();
    if rows.len() < 2 {
        return None;
    }
    let row_totals: Vec<f64> = rows
        .iter()
        .map(|r| r.values().sum::<u64>() as f64)
        .collect();
    let total: f64 = row_totals.iter().sum();
    let min_row = row_totals.iter().cloned().fold(f64::INFINITY, f64::min);
    let mut symbols: Vec<char> = rows.iter().flat_map(|r| r.keys().copied()).collect();
    symbols.sort_unstable();
    symbols.dedup();
    let column = |s: char| -> Vec<f64> {
        rows.iter()
            .map(|r| r.get(&s).copied().unwrap_or(0) as f64)
            .collect()
    };
    // A column is kept when even the smallest row expects 5 of it.
    let mut columns: Vec<Vec<f64>> = Vec::new();
    let mut pooled = vec![0.0; rows.len()];
    for s in symbols {
        let c = column(s);
        let col_total: f64 = c.iter().sum();
        if min_row * col_total / total >= 5.0 {
            columns.push(c);
        } else {
            for (p, v) in pooled.iter_mut().zip(c) {
                *p += v;
            }
        }
    }
    let pooled_total: f64 = pooled.iter().sum();
    if pooled_total > 0.0 && min_row * pooled_total / total >= 5.0 {
        columns.push(pooled);
    }
    if columns.len() < 2 {
        return None;
    }
    let kept_rows: Vec<f64> = (0..rows.len())
        .map(|i| columns.iter().map(|c| c[i]).sum())
        .collect();
    let kept_total: f64 = kept_rows.iter().sum();
    let mut stat = 0.0;
    for c in &columns {
        let col_total: f64 = c.iter().sum();
        for (i, observed) in c.iter().enumerate() {
            let expected = kept_rows[i] * col_total / kept_total;
            if expected > 0.0 {
                stat += (observed - expected).powi(2) / expected;
            }
        }
    }
    let df = (rows.len() - 1) * (columns.len() - 1);
    Some((stat, df, chi_square_sf(stat, df as f64)))
}

/// Kendall's S (concordant minus discordant pairs) of the pairs' second
/// elements ordered by their first: `n(n-1)/2` when both orders agree,
/// its negative when one is the other reversed. Ties (none in our uses:
/// originals and pseudonyms are distinct) count as discordant. O(n log n).
pub fn kendall_s<A: Ord, B: Ord + Clone>(pairs: &mut [(A, B)]) -> i64 {
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    let mut ys: Vec<B> = pairs.iter().map(|p| p.1.clone()).collect();
    let n = ys.len() as i64;
    let inversions = merge_count(&mut ys);
    n * (n - 1) / 2 - 2 * inversions as i64
}

/// Sorts `v`, answering how many pairs were out of order (ties counted).
fn merge_count<B: Ord + Clone>(v: &mut [B]) -> u64 {
    let n = v.len();
    if n < 2 {
        return 0;
    }
    let mid = n / 2;
    let mut count = merge_count(&mut v[..mid]) + merge_count(&mut v[mid..]);
    let mut merged = Vec::with_capacity(n);
    let (mut i, mut j) = (0, mid);
    while i < mid && j < n {
        if v[i] < v[j] {
            merged.push(v[i].clone());
            i += 1;
        } else {
            // Every remaining left item is out of order with v[j].
            count += (mid - i) as u64;
            merged.push(v[j].clone());
            j += 1;
        }
    }
    merged.extend_from_slice(&v[i..mid]);
    merged.extend_from_slice(&v[j..n]);
    v.clone_from_slice(&merged);
    count
}

/// Up to this many items, Kendall's S is judged by its exact distribution.
const EXACT_UP_TO: usize = 100;

/// The exact null distribution of inversions of a random permutation of
/// `n` (Mahonian numbers, as probabilities), cumulative: `cdf[k]` = P(I ≤ k).
fn inversions_cdf(n: usize) -> Vec<f64> {
    let max = n * n.saturating_sub(1) / 2;
    let mut p = vec![0.0; max + 1];
    p[0] = 1.0;
    let mut reach = 0;
    for k in 2..=n {
        // Adding the k-th item adds 0..k-1 inversions, each equally likely.
        let new_reach = reach + k - 1;
        let mut prefix = vec![0.0; reach + 2];
        for i in 0..=reach {
            prefix[i + 1] = prefix[i] + p[i];
        }
        let mut next = vec![0.0; new_reach + 1];
        for (j, slot) in next.iter_mut().enumerate() {
            let hi = j.min(reach);
            let lo = j.saturating_sub(k - 1);
            if lo <= hi {
                *slot = (prefix[hi + 1] - prefix[lo]) / k as f64;
            }
        }
        p[..=new_reach].copy_from_slice(&next);
        reach = new_reach;
    }
    let mut acc = 0.0;
    p.iter()
        .map(|v| {
            acc += v;
            acc.min(1.0)
        })
        .collect()
}

/// The two-sided p-value of Kendall's S over `n` items under independence:
/// exact up to [`EXACT_UP_TO`] (the distributions memoized in `cache`), the
/// normal approximation with continuity correction beyond.
pub fn kendall_p(n: usize, s: i64, cache: &mut HashMap<usize, Vec<f64>>) -> f64 {
    if n < 2 {
        return 1.0;
    }
    let pairs = (n * (n - 1) / 2) as i64;
    let s = s.abs().min(pairs);
    if n <= EXACT_UP_TO {
        let cdf = cache.entry(n).or_insert_with(|| inversions_cdf(n));
        // S = pairs − 2I: |S| ≥ s when I ≤ (pairs − s)/2 or I ≥ (pairs + s)/2.
        let low = (pairs - s) / 2;
        let tail = cdf[low as usize];
        // Symmetric: the upper tail equals the lower one.
        return (2.0 * tail).min(1.0);
    }
    kendall_p_normal(n, s)
}

/// [`kendall_p`] by the normal approximation, continuity-corrected.
fn kendall_p_normal(n: usize, s: i64) -> f64 {
    let n = n as f64;
    let sd = (n * (n - 1.0) * (2.0 * n + 5.0) / 18.0).sqrt();
    (2.0 * normal_sf((s.abs() as f64 - 1.0).max(0.0) / sd)).min(1.0)
}

/// |τ| beyond which `n` items are judged ordered at significance `alpha`
/// (normal approximation; shown to people beside the exact decision).
pub fn kendall_tau_bound(n: usize, alpha: f64) -> f64 {
    if n < 2 {
        return 1.0;
    }
    let nf = n as f64;
    let sd = (nf * (nf - 1.0) * (2.0 * nf + 5.0) / 18.0).sqrt();
    let pairs = nf * (nf - 1.0) / 2.0;
    ((normal_isf(alpha / 2.0) * sd + 1.0) / pairs).min(1.0)
}

/// The one-sided p-value that sample `a` has a larger mean than sample `b`
/// (Welch's z). Equal samples without spread: 1; a larger mean without
/// spread: 0.
pub fn greater_mean_p(a: &[f64], b: &[f64]) -> f64 {
    if a.is_empty() || b.is_empty() {
        return 1.0;
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let var = |v: &[f64], m: f64| {
        if v.len() < 2 {
            0.0
        } else {
            v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64
        }
    };
    let (ma, mb) = (mean(a), mean(b));
    let se = (var(a, ma) / a.len() as f64 + var(b, mb) / b.len() as f64).sqrt();
    if se == 0.0 {
        return if ma > mb { 0.0 } else { 1.0 };
    }
    normal_sf((ma - mb) / se)
}

/// The one-sided p-value that events happen more often in sample `a`
/// (`hits_a` of `n_a`) than in `b` (two-proportion z, pooled).
pub fn greater_share_p(hits_a: usize, n_a: usize, hits_b: usize, n_b: usize) -> f64 {
    if n_a == 0 || n_b == 0 {
        return 1.0;
    }
    let (pa, pb) = (hits_a as f64 / n_a as f64, hits_b as f64 / n_b as f64);
    let pooled = (hits_a + hits_b) as f64 / (n_a + n_b) as f64;
    let se = (pooled * (1.0 - pooled) * (1.0 / n_a as f64 + 1.0 / n_b as f64)).sqrt();
    if se == 0.0 {
        return if pa > pb { 0.0 } else { 1.0 };
    }
    normal_sf((pa - pb) / se)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance * b.abs().max(1e-300)
    }

    #[test]
    fn the_distributions_match_their_tables() {
        // Chi-square critical values: P(X ≥ 3.841 | df 1) = 0.05,
        // P(X ≥ 23.209 | df 10) = 0.01, P(X ≥ 124.342 | df 100) = 0.05.
        assert!(close(chi_square_sf(3.841_459, 1.0), 0.05, 1e-4));
        assert!(close(chi_square_sf(23.209_25, 10.0), 0.01, 1e-4));
        assert!(close(chi_square_sf(124.342, 100.0), 0.05, 1e-3));
        assert!(close(chi_square_sf(2.0, 2.0), (-1.0f64).exp(), 1e-9));
        assert_eq!(chi_square_sf(0.0, 3.0), 1.0);
        assert!(chi_square_sf(10_000.0, 63.0) < 1e-300 + 1e-12);
        // Normal: P(Z ≥ 1.959964) = 0.025, P(Z ≥ 4.753424) = 1e-6.
        assert!(close(normal_sf(1.959_964), 0.025, 1e-5));
        assert!(close(normal_sf(4.753_424), 1e-6, 1e-4));
        assert!(close(normal_isf(0.025), 1.959_964, 1e-5));
        assert!(close(ln_gamma(10.0), 362_880f64.ln(), 1e-12));
    }

    #[test]
    fn kendalls_s_counts_agreeing_pairs() {
        let mut same: Vec<(u32, u32)> = (0..50).map(|i| (i, i)).collect();
        assert_eq!(kendall_s(&mut same), 50 * 49 / 2);
        let mut reversed: Vec<(u32, u32)> = (0..50).map(|i| (i, 100 - i)).collect();
        assert_eq!(kendall_s(&mut reversed), -(50 * 49 / 2));
        // One swap of neighbours: one discordant pair.
        let mut one: Vec<(u32, u32)> = vec![(0, 0), (1, 2), (2, 1), (3, 3)];
        assert_eq!(kendall_s(&mut one), 6 - 2);
        // Against the O(n²) definition on a shuffled sample.
        let ys = [7, 3, 9, 1, 4, 8, 2, 6, 5, 0];
        let mut pairs: Vec<(usize, i32)> = ys.iter().copied().enumerate().collect();
        let mut s = 0i64;
        for i in 0..ys.len() {
            for j in i + 1..ys.len() {
                s += (ys[j] - ys[i]).signum() as i64;
            }
        }
        assert_eq!(kendall_s(&mut pairs), s);
    }

    #[test]
    fn kendalls_p_is_exact_for_small_samples_and_normal_beyond() {
        let mut cache = HashMap::new();
        // n = 4: 24 permutations; |S| = 6 (sorted or reversed) in 2 of them.
        assert!(close(kendall_p(4, 6, &mut cache), 2.0 / 24.0, 1e-12));
        // |S| ≥ 4: at most one inversion or at least five: 1 + 3 + 3 + 1 of 24.
        assert!(close(kendall_p(4, 4, &mut cache), 8.0 / 24.0, 1e-12));
        assert_eq!(kendall_p(4, 0, &mut cache), 1.0);
        // The exact distribution sums to one.
        assert!(close(*inversions_cdf(30).last().unwrap(), 1.0, 1e-12));
        // At the seam the two agree closely.
        let n = 100;
        let sd = ((n * (n - 1) * (2 * n + 5)) as f64 / 18.0).sqrt();
        let s = (3.0 * sd) as i64;
        let exact = kendall_p(n, s, &mut cache);
        let normal = kendall_p_normal(n, s);
        assert!(close(exact, normal, 0.1), "{exact} vs {normal}");
        // A sorted 300 is far beyond chance; its bound is about 0.2.
        assert!(kendall_p(300, 300 * 299 / 2, &mut cache) < 1e-50);
        let bound = kendall_tau_bound(300, 1e-6);
        assert!((0.15..0.25).contains(&bound), "{bound}");
    }

    #[test]
    fn independence_is_told_from_dependence() {
        let table = |rows: &[&[(char, u64)]]| -> Vec<HashMap<char, u64>> {
            rows.iter().map(|r| r.iter().copied().collect()).collect()
        };
        // The same shares: a statistic of 0.
        let (stat, df, p) = chi_square_independence(&table(&[
            &[('a', 50), ('b', 50)],
            &[('a', 100), ('b', 100)],
        ]))
        .unwrap();
        assert_eq!((stat, df, p), (0.0, 1, 1.0));
        // One symbol early, another late: far beyond chance.
        let (_, _, p) = chi_square_independence(&table(&[
            &[('a', 500), ('b', 20)],
            &[('a', 20), ('b', 500)],
        ]))
        .unwrap();
        assert!(p < 1e-100);
        // One symbol everywhere: nothing to compare.
        assert!(chi_square_independence(&table(&[&[('a', 50)], &[('a', 70)]])).is_none());
        // Rare symbols are pooled: 2x2 of (a, rest).
        let (_, df, _) = chi_square_independence(&table(&[
            &[('a', 100), ('x', 1), ('y', 2), ('z', 3)],
            &[('a', 100), ('x', 3), ('y', 2), ('z', 1)],
        ]))
        .unwrap();
        assert_eq!(df, 1);
    }

    #[test]
    fn the_two_sample_tests_see_a_larger_mean_and_share() {
        assert_eq!(greater_mean_p(&[10.0; 30], &[0.0; 30]), 0.0);
        assert_eq!(greater_mean_p(&[0.0; 30], &[0.0; 30]), 1.0);
        let a: Vec<f64> = (0..100).map(|i| (i % 3) as f64).collect();
        assert!(greater_mean_p(&a, &a) > 0.4);
        assert_eq!(greater_share_p(30, 30, 30, 30), 1.0);
        assert!(greater_share_p(30, 30, 0, 30) < 1e-10);
        assert!(greater_share_p(15, 30, 14, 30) > 0.3);
    }
}
