//! Hostile-input property test of the run-request decoder: thousands of seeded random and
//! mutated bodies go through `POST /agent`'s checks and the resume rules
//! (`rein_agui::fuzzing::run_input`, the entry point of `fuzz/fuzz_targets/agui_run_input.rs`).
//! None may panic: a refusal is a 4xx with a code, an accepted resume answers every pending
//! interrupt once with a valid answer.
#![cfg(feature = "test-util")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_agui::fuzzing::{self, Verdict};

/// The seed corpus of the fuzz target (`fuzz/corpus/agui_run_input/`).
const SEEDS: &[&str] = &[
    include_str!("../../../../fuzz/corpus/agui_run_input/run"),
    include_str!("../../../../fuzz/corpus/agui_run_input/run_parts"),
    include_str!("../../../../fuzz/corpus/agui_run_input/resume_all"),
    include_str!("../../../../fuzz/corpus/agui_run_input/resume_edit"),
    include_str!("../../../../fuzz/corpus/agui_run_input/resume_missing"),
    include_str!("../../../../fuzz/corpus/agui_run_input/resume_duplicate"),
    include_str!("../../../../fuzz/corpus/agui_run_input/bad_thread"),
    include_str!("../../../../fuzz/corpus/agui_run_input/resume_other_action"),
];

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const INTERESTING: &[&[u8]] = &[
    b"\"",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\\",
    b"\\u0000",
    b"\xff",
    b"\xc3",
    b"null",
    b"true",
    b"1e999",
    b"-0",
    b"\"resume\":[]",
    b"\"cancelled\"",
    b"\"resolved\"",
    b"\"approved\":true",
    b"\"v1:before_tool_call:t1:n1#k1\"",
    b"\"approvedActionFingerprint\":\"f1\"",
    b"\"approvedActionFingerprint\":\"f0\"",
    b"\"v1:tool_call:t3:n3\"",
    b"\"threadId\":\".x\"",
    b"\"runId\":\"\"",
];

fn mutate(rng: &mut Rng, base: &[u8]) -> Vec<u8> {
    let mut v = base.to_vec();
    for _ in 0..=rng.below(2) {
        let at = rng.below(v.len() + 1);
        match rng.below(5) {
            0 if !v.is_empty() => {
                let i = at.min(v.len() - 1);
                v[i] = rng.next() as u8;
            }
            1 => {
                let piece = INTERESTING[rng.below(INTERESTING.len())];
                v.splice(at..at, piece.iter().copied());
            }
            2 if at < v.len() => {
                let end = (at + rng.below(16)).min(v.len());
                v.drain(at..end);
            }
            3 => v.truncate(at),
            _ => {
                let from = rng.below(v.len());
                let end = (from + rng.below(48)).min(v.len());
                let piece = v[from..end].to_vec();
                v.splice(at..at, piece);
            }
        }
    }
    v
}

#[test]
fn the_unmutated_seeds_decode_as_their_names_say() {
    let verdicts: Vec<Verdict> = SEEDS
        .iter()
        .map(|s| fuzzing::run_input(s.as_bytes()))
        .collect();
    assert_eq!(
        verdicts,
        [
            Verdict::Run,
            Verdict::Run,
            Verdict::Resume,
            Verdict::Resume,
            Verdict::Refused("INTERRUPTS_UNANSWERED"),
            Verdict::Refused("DUPLICATE_RESUME_ENTRY"),
            Verdict::Refused("INVALID_THREAD_ID"),
            Verdict::Refused("FINGERPRINT_MISMATCH"),
        ]
    );
}

#[test]
fn mutated_and_random_run_requests_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut runs, mut resumes, mut refused) = (0, 0, 0);
    for case in 0..40_000 {
        let input = if case % 5 == 0 {
            let n = rng.below(256);
            (0..n).map(|_| rng.next() as u8).collect()
        } else {
            let seed = SEEDS[rng.below(SEEDS.len())];
            mutate(&mut rng, seed.as_bytes())
        };
        match fuzzing::run_input(&input) {
            Verdict::Run | Verdict::NoMessage => runs += 1,
            Verdict::Resume => resumes += 1,
            Verdict::Refused(_) => refused += 1,
            _ => {}
        }
    }
    // The mutations reach every branch, not only the JSON parser's refusals.
    assert!(
        runs > 100 && resumes > 100 && refused > 100,
        "{runs} {resumes} {refused}"
    );
}
