//! The N examples x K judges x C classes matrix that aggregators read, with missing entries.

use rustc_hash::FxHashMap as HashMap;

use crate::{CoreError, argmax, normalize_prob_vector};

/// A validated judgments matrix, stored sparse: memory follows the entries present, not
/// examples x judges (a crowd of 200,000 judges who each judged one example is a few
/// megabytes).
///
/// Invariants: every present entry is a probability vector of length `n_classes` summing
/// to 1; `n_classes >= 2`; example ids and judge names are unique. For binary tasks class
/// 1 is the positive class ("Yes", "A") and an entry is `[1 - p, p]`. Storage is
/// compressed rows: example `n`'s entries are `row_start[n]..row_start[n + 1]`, their
/// judges strictly increasing.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgments {
    example_ids: Vec<String>,
    judge_names: Vec<String>,
    n_classes: usize,
    row_start: Vec<usize>,
    judges: Vec<u32>,
    /// `[entry][class]`.
    probs: Vec<f64>,
}

impl Judgments {
    /// Builds from a dense row-major (example-major) list of N x K optional entries.
    pub fn from_entries(
        example_ids: Vec<String>,
        judge_names: Vec<String>,
        n_classes: usize,
        entries: Vec<Option<Vec<f64>>>,
    ) -> Result<Self, CoreError> {
        let (n, k) = (example_ids.len(), judge_names.len());
        if entries.len() != n * k {
            return Err(CoreError::Shape { what: "judgment entries", expected: n * k, got: entries.len() });
        }
        let mut b = JudgmentsBuilder::new(n_classes)?;
        for id in &example_ids {
            b.example(id);
        }
        for name in &judge_names {
            b.judge(name);
        }
        for (i, e) in entries.into_iter().enumerate() {
            b.push(&example_ids[i / k], &judge_names[i % k], e)?;
        }
        Ok(b.build())
    }

    pub fn n_examples(&self) -> usize {
        self.example_ids.len()
    }

    pub fn n_judges(&self) -> usize {
        self.judge_names.len()
    }

    pub fn n_classes(&self) -> usize {
        self.n_classes
    }

    pub fn example_ids(&self) -> &[String] {
        &self.example_ids
    }

    pub fn judge_names(&self) -> &[String] {
        &self.judge_names
    }

    /// Judge `k`'s probability vector on example `n`, or `None` when missing.
    pub fn get(&self, n: usize, k: usize) -> Option<&[f64]> {
        let (lo, hi) = (self.row_start[n], self.row_start[n + 1]);
        let at = lo + self.judges[lo..hi].binary_search(&(k as u32)).ok()?;
        Some(&self.probs[at * self.n_classes..(at + 1) * self.n_classes])
    }

    /// Example `n`'s present entries: (judge, probability vector), judges increasing.
    pub fn row(&self, n: usize) -> impl ExactSizeIterator<Item = (usize, &[f64])> + '_ {
        let (lo, hi) = (self.row_start[n], self.row_start[n + 1]);
        let c = self.n_classes;
        self.judges[lo..hi].iter().zip(self.probs[lo * c..hi * c].chunks_exact(c)).map(|(&k, p)| (k as usize, p))
    }

    /// Where example `n`'s entries are among [`entries`](Self::entries): their positions
    /// in that order, in the order [`row`](Self::row) yields them.
    pub fn entry_range(&self, n: usize) -> std::ops::Range<usize> {
        self.row_start[n]..self.row_start[n + 1]
    }

    /// Every present entry: (example, judge, probability vector), example-major.
    pub fn entries(&self) -> impl Iterator<Item = (usize, usize, &[f64])> + '_ {
        (0..self.n_examples()).flat_map(move |n| self.row(n).map(move |(k, p)| (n, k, p)))
    }

    /// Judge `k`'s hard vote on example `n` (argmax, lowest class on exact ties, so a
    /// binary `p = 0.5` votes 0 as in the SkillAggregation paper's `b = 1[y > 0.5]`).
    pub fn vote(&self, n: usize, k: usize) -> Option<usize> {
        self.get(n, k).map(argmax)
    }

    /// Number of present entries.
    pub fn n_present(&self) -> usize {
        self.judges.len()
    }

    /// The sub-matrix of examples `examples` (distinct, in that order) and the judges
    /// `keep` marks, without the examples left with no entry, and for each of its
    /// examples its position in `examples`. Judges keep their relative order.
    pub fn restrict(&self, examples: &[usize], keep: &[bool]) -> (Self, Vec<usize>) {
        let c = self.n_classes;
        let mut new_index = vec![u32::MAX; self.n_judges()];
        let mut judge_names = Vec::new();
        for (k, name) in self.judge_names.iter().enumerate() {
            if keep.get(k).copied().unwrap_or(false) {
                new_index[k] = judge_names.len() as u32;
                judge_names.push(name.clone());
            }
        }
        let (mut example_ids, mut origin, mut row_start) = (Vec::new(), Vec::new(), vec![0]);
        let (mut judges, mut probs) = (Vec::new(), Vec::new());
        for (at, &n) in examples.iter().enumerate() {
            let before = judges.len();
            for (k, p) in self.row(n) {
                if new_index[k] != u32::MAX {
                    judges.push(new_index[k]);
                    probs.extend_from_slice(p);
                }
            }
            if judges.len() > before {
                example_ids.push(self.example_ids[n].clone());
                origin.push(at);
                row_start.push(judges.len());
            }
        }
        debug_assert_eq!(probs.len(), judges.len() * c);
        (Judgments { example_ids, judge_names, n_classes: c, row_start, judges, probs }, origin)
    }

    /// The same data with judges in the order `order` (indices into the current judges).
    /// Used to check that aggregators do not depend on judge order.
    pub fn reorder_judges(&self, order: &[usize]) -> Result<Self, CoreError> {
        let mut sorted = order.to_vec();
        sorted.sort_unstable();
        if sorted != (0..self.n_judges()).collect::<Vec<_>>() {
            return Err(CoreError::Shape { what: "judge permutation", expected: self.n_judges(), got: order.len() });
        }
        let names = order.iter().map(|&k| self.judge_names[k].clone()).collect();
        let entries = (0..self.n_examples())
            .flat_map(|n| order.iter().map(move |&k| (n, k)))
            .map(|(n, k)| self.get(n, k).map(<[f64]>::to_vec))
            .collect();
        Self::from_entries(self.example_ids.clone(), names, self.n_classes, entries)
    }
}

const MISSING: u32 = u32::MAX;

/// Collects judgments one (example, judge) entry at a time, in any order.
/// Examples and judges are numbered in order of first appearance.
#[derive(Debug)]
pub struct JudgmentsBuilder {
    n_classes: usize,
    example_index: HashMap<String, usize>,
    judge_index: HashMap<String, usize>,
    example_ids: Vec<String>,
    judge_names: Vec<String>,
    /// (example, judge, start of its probabilities in `values` or `MISSING` for an
    /// explicitly missing entry), in push order. `u32` indices: at most 4 billion values.
    entries: Vec<(u32, u32, u32)>,
    /// Duplicate detection. While every example's entries arrive together (the usual
    /// example-major file), a new entry is compared with its example's run only; the
    /// first example that comes back, or a run longer than `RUN_SCAN`, switches to a
    /// set of every (example, judge) pair.
    seen: Option<rustc_hash::FxHashSet<(u32, u32)>>,
    run_start: usize,
    closed: Vec<bool>,
    values: Vec<f64>,
}

/// The longest run of one example's entries checked for duplicates by a scan.
const RUN_SCAN: usize = 64;

impl JudgmentsBuilder {
    pub fn new(n_classes: usize) -> Result<Self, CoreError> {
        if n_classes < 2 {
            return Err(CoreError::TooFewClasses(n_classes));
        }
        Ok(Self {
            n_classes,
            example_index: HashMap::default(),
            judge_index: HashMap::default(),
            example_ids: Vec::new(),
            judge_names: Vec::new(),
            entries: Vec::new(),
            seen: None,
            run_start: 0,
            closed: Vec::new(),
            values: Vec::new(),
        })
    }

    /// Registers an example (idempotent) and returns its index.
    pub fn example(&mut self, id: &str) -> usize {
        // Files are usually example-major: the last example again skips the hash.
        if let Some(n) = self.entries.last().map(|e| e.0 as usize)
            && self.example_ids[n] == id
        {
            return n;
        }
        intern(&mut self.example_index, &mut self.example_ids, id)
    }

    /// Registers a judge (idempotent) and returns its index.
    pub fn judge(&mut self, name: &str) -> usize {
        intern(&mut self.judge_index, &mut self.judge_names, name)
    }

    /// Adds one entry; `None` records that the judge was asked but gave no usable answer.
    pub fn push(&mut self, example: &str, judge: &str, probs: Option<Vec<f64>>) -> Result<(), CoreError> {
        self.push_slice(example, judge, probs.as_deref())
    }

    /// [`push`](Self::push) without taking ownership of the probabilities.
    pub fn push_slice(&mut self, example: &str, judge: &str, probs: Option<&[f64]>) -> Result<(), CoreError> {
        let start = self.values.len();
        if let Some(p) = probs {
            self.values.extend_from_slice(p);
            if let Err(e) = normalize_prob_vector(&mut self.values[start..], self.n_classes) {
                self.values.truncate(start);
                return Err(e);
            }
        }
        let key = (self.example(example) as u32, self.judge(judge) as u32);
        if self.is_duplicate(key) {
            self.values.truncate(start);
            return Err(CoreError::Duplicate { example: example.to_owned(), judge: judge.to_owned() });
        }
        self.entries.push((key.0, key.1, if probs.is_some() { start as u32 } else { MISSING }));
        Ok(())
    }

    /// Whether `key` was pushed before (and, when not, records it).
    fn is_duplicate(&mut self, key: (u32, u32)) -> bool {
        if let Some(seen) = &mut self.seen {
            return !seen.insert(key);
        }
        let current = self.entries.get(self.run_start).map(|e| e.0);
        if current != Some(key.0) {
            if let Some(c) = current {
                self.closed[c as usize] = true;
            }
            self.closed.resize(self.closed.len().max(key.0 as usize + 1), false);
            if self.closed[key.0 as usize] {
                return self.switch_to_set(key);
            }
            self.run_start = self.entries.len();
            return false;
        }
        let run = &self.entries[self.run_start..];
        if run.len() >= RUN_SCAN {
            return self.switch_to_set(key);
        }
        run.iter().any(|e| e.1 == key.1)
    }

    fn switch_to_set(&mut self, key: (u32, u32)) -> bool {
        let mut seen: rustc_hash::FxHashSet<(u32, u32)> = self.entries.iter().map(|e| (e.0, e.1)).collect();
        let dup = !seen.insert(key);
        self.seen = Some(seen);
        self.closed = Vec::new();
        dup
    }

    /// Binary shorthand: `p` is the probability of the positive class (class 1).
    pub fn push_binary(&mut self, example: &str, judge: &str, p: Option<f64>) -> Result<(), CoreError> {
        if self.n_classes != 2 {
            return Err(CoreError::WrongClassCount { got: 2, expected: self.n_classes });
        }
        self.push_slice(example, judge, p.map(|p| [1.0 - p, p]).as_ref().map(|a| &a[..]))
    }

    pub fn build(self) -> Judgments {
        let (n, c) = (self.example_ids.len(), self.n_classes);
        let mut present: Vec<(u32, u32, u32)> = self.entries;
        present.retain(|e| e.2 != MISSING);
        let mut row_start = vec![0usize; n + 1];
        for &(e, _, _) in &present {
            row_start[e as usize + 1] += 1;
        }
        for i in 0..n {
            row_start[i + 1] += row_start[i];
        }
        // Rows by a counting sort on the example (linear; skipped when entries came
        // example-major), then each row, a few entries, by judge.
        if !present.is_sorted_by_key(|e| e.0) {
            let mut next = row_start.clone();
            let mut by_row = vec![(0, 0, 0); present.len()];
            for e in present {
                by_row[next[e.0 as usize]] = e;
                next[e.0 as usize] += 1;
            }
            present = by_row;
        }
        for w in row_start.windows(2) {
            let row = &mut present[w[0]..w[1]];
            if !row.is_sorted_by_key(|e| e.1) {
                row.sort_unstable_by_key(|e| e.1);
            }
        }
        // Entries pushed in (example, judge) order already lie in `values` in row order:
        // the usual example-major file keeps its buffer instead of copying it.
        let in_place = present.iter().enumerate().all(|(k, e)| e.2 as usize == k * c);
        let probs = if in_place {
            let mut values = self.values;
            values.truncate(present.len() * c);
            values.shrink_to_fit();
            values
        } else {
            let mut probs = Vec::with_capacity(present.len() * c);
            for &(_, _, start) in &present {
                probs.extend_from_slice(&self.values[start as usize..start as usize + c]);
            }
            probs
        };
        let judges = present.into_iter().map(|(_, j, _)| j).collect();
        Judgments {
            example_ids: self.example_ids,
            judge_names: self.judge_names,
            n_classes: c,
            row_start,
            judges,
            probs,
        }
    }
}

fn intern(index: &mut HashMap<String, usize>, names: &mut Vec<String>, name: &str) -> usize {
    if let Some(&i) = index.get(name) {
        return i;
    }
    names.push(name.to_owned());
    index.insert(name.to_owned(), names.len() - 1);
    names.len() - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restrict_keeps_the_chosen_examples_and_judges_and_drops_the_empty() {
        let mut b = JudgmentsBuilder::new(2).unwrap();
        for (e, k, p) in [("e0", "a", 0.9), ("e0", "b", 0.2), ("e1", "b", 0.4), ("e2", "a", 0.7), ("e2", "c", 0.1)] {
            b.push_binary(e, k, Some(p)).unwrap();
        }
        let j = b.build();
        let (sub, position) = j.restrict(&[2, 1, 0], &[true, false, true]);
        assert_eq!(sub.example_ids(), ["e2", "e0"], "e1 had only b");
        assert_eq!(position, [0, 2]);
        assert_eq!(sub.judge_names(), ["a", "c"]);
        assert_eq!(sub.get(0, 1), j.get(2, 2));
        assert_eq!((sub.get(1, 0), sub.get(1, 1)), (j.get(0, 0), None));
    }

    #[test]
    fn builder_keeps_first_appearance_order_and_missing_entries() {
        let mut b = JudgmentsBuilder::new(2).unwrap();
        b.push_binary("e2", "j1", Some(0.9)).unwrap();
        b.push_binary("e1", "j2", Some(0.2)).unwrap();
        b.push_binary("e1", "j1", None).unwrap();
        let j = b.build();
        assert_eq!(j.example_ids(), ["e2", "e1"]);
        assert_eq!(j.judge_names(), ["j1", "j2"]);
        assert_eq!(j.get(0, 0), Some(&[0.09999999999999998, 0.9][..]));
        assert_eq!(j.get(0, 1), None);
        assert_eq!(j.get(1, 0), None);
        assert_eq!(j.vote(1, 1), Some(0));
        assert_eq!(j.n_present(), 2);
    }

    #[test]
    fn duplicates_and_bad_vectors_are_rejected() {
        let mut b = JudgmentsBuilder::new(2).unwrap();
        b.push_binary("e", "j", Some(0.5)).unwrap();
        let err = b.push_binary("e", "j", None).unwrap_err();
        assert_eq!(err.to_string(), "duplicate judgment for example `e` by judge `j`");
        assert!(b.push_binary("e", "k", Some(1.5)).is_err());
        assert!(b.push("e", "k", Some(vec![0.5, 0.5, 0.0])).is_err());
        assert!(JudgmentsBuilder::new(1).is_err());
    }

    #[test]
    fn rows_list_present_entries_in_judge_order() {
        let mut b = JudgmentsBuilder::new(2).unwrap();
        b.push_binary("e1", "j3", Some(0.3)).unwrap();
        b.push_binary("e1", "j1", Some(0.1)).unwrap();
        b.push_binary("e2", "j2", None).unwrap();
        b.push_binary("e3", "j2", Some(0.2)).unwrap();
        let j = b.build();
        let row: Vec<(usize, f64)> = j.row(0).map(|(k, p)| (k, p[1])).collect();
        // Judges are numbered by first appearance: j3 = 0, j1 = 1, j2 = 2.
        assert_eq!(row, [(0, 0.3), (1, 0.1)]);
        assert_eq!(j.row(1).len(), 0);
        assert_eq!(j.entries().map(|(n, k, _)| (n, k)).collect::<Vec<_>>(), [(0, 0), (0, 1), (2, 2)]);
        assert_eq!(j.get(2, 2).map(|p| p[1]), Some(0.2));
        assert_eq!(j.get(2, 0), None);
    }

    /// Duplicates are found in any push order: example-major runs (the fast path), runs
    /// longer than the scan, and examples that come back (the set), against a plain set.
    #[test]
    fn duplicates_are_found_in_any_order() {
        let mut state = 12345u64;
        let mut next = |m: u64| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) % m
        };
        for (examples, judges, pushes, grouped) in [(50, 5, 400, true), (3, 200, 500, true), (40, 8, 300, false)] {
            let mut order: Vec<(u64, u64)> = (0..pushes).map(|_| (next(examples), next(judges))).collect();
            if grouped {
                order.sort_by_key(|&(e, _)| e);
            }
            let mut b = JudgmentsBuilder::new(2).unwrap();
            let mut reference = std::collections::HashSet::new();
            for (e, j) in order {
                let got = b.push_binary(&format!("e{e}"), &format!("j{j}"), Some(0.5)).is_err();
                assert_eq!(got, !reference.insert((e, j)), "e{e} j{j}");
            }
            assert_eq!(b.build().n_present(), reference.len());
        }
    }

    /// Whatever the push order (example-major with judges shuffled, examples that come
    /// back, missing entries), every pushed value is found at its (example, judge) and
    /// each row lists its judges strictly increasing.
    #[test]
    fn any_push_order_builds_the_same_matrix() {
        let mut state = 99u64;
        let mut next = |m: u64| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) % m
        };
        for grouped in [true, false] {
            let mut cells: Vec<(u64, u64)> = (0..30).flat_map(|e| (0..7).map(move |j| (e, j))).collect();
            for i in (1..cells.len()).rev() {
                cells.swap(i, next(i as u64 + 1) as usize);
            }
            if grouped {
                cells.sort_by_key(|&(e, _)| e);
            }
            let value = |e: u64, j: u64| ((e * 7 + j) % 97) as f64 / 100.0;
            let mut b = JudgmentsBuilder::new(2).unwrap();
            for &(e, j) in &cells {
                let p = (next(4) != 0).then(|| value(e, j));
                b.push_binary(&format!("e{e}"), &format!("j{j}"), p).unwrap();
            }
            let built = b.build();
            let mut found = 0;
            for n in 0..built.n_examples() {
                let row: Vec<usize> = built.row(n).map(|(k, _)| k).collect();
                assert!(row.windows(2).all(|w| w[0] < w[1]), "row {n}: {row:?}");
                for (k, p) in built.row(n) {
                    let e: u64 = built.example_ids()[n][1..].parse().unwrap();
                    let j: u64 = built.judge_names()[k][1..].parse().unwrap();
                    assert_eq!(p[1], value(e, j), "e{e} j{j}");
                    found += 1;
                }
            }
            assert_eq!(found, built.n_present());
            assert!(found > 100 && found < 30 * 7, "{found} present");
        }
    }

    #[test]
    fn entry_ranges_locate_each_rows_entries() {
        let mut b = JudgmentsBuilder::new(2).unwrap();
        for (e, j, p) in [("a", "x", 0.1), ("b", "y", 0.2), ("a", "y", 0.3), ("c", "x", 0.4), ("c", "y", 0.5)] {
            b.push_binary(e, j, Some(p)).unwrap();
        }
        let m = b.build();
        let entries: Vec<(usize, usize, f64)> = m.entries().map(|(n, k, p)| (n, k, p[1])).collect();
        for n in 0..m.n_examples() {
            let from_range: Vec<(usize, usize, f64)> = entries[m.entry_range(n)].to_vec();
            let from_row: Vec<(usize, usize, f64)> = m.row(n).map(|(k, p)| (n, k, p[1])).collect();
            assert_eq!(from_range, from_row);
        }
        assert_eq!(m.entry_range(2).len(), 2);
    }

    #[test]
    fn half_votes_negative() {
        let mut b = JudgmentsBuilder::new(2).unwrap();
        b.push_binary("e", "j", Some(0.5)).unwrap();
        assert_eq!(b.build().vote(0, 0), Some(0));
    }

    #[test]
    fn reorder_judges_permutes_columns() {
        let j = Judgments::from_entries(
            vec!["a".into()],
            vec!["x".into(), "y".into()],
            2,
            vec![Some(vec![0.1, 0.9]), None],
        )
        .unwrap();
        let r = j.reorder_judges(&[1, 0]).unwrap();
        assert_eq!(r.judge_names(), ["y", "x"]);
        assert_eq!(r.get(0, 0), None);
        assert_eq!(r.get(0, 1), Some(&[0.1, 0.9][..]));
        assert!(j.reorder_judges(&[0, 0]).is_err());
    }
}
