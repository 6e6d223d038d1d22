fn best_two(scores: f32[B, N]) -> (f32[B, 2], i64[B, 2])
fn ranked(scores: f64[B, N]) -> (f64[B, N], i64[B, N])
fn some(counts: i64[N], k: i64) -> (i64[_], i64[_])
fn main() -> ()
