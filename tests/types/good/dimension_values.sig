fn cross_entropy(logits: f32[B, C], labels: i64[B]) -> f32
fn rows_of(x: f32[N, D]) -> f32[N, D]
fn nested(pair: (f32[K], f32[R, K])) -> i64
fn shadowed(x: f32[N]) -> i64
fn main() -> ()
