fn embed(table: f32[V, D], tokens: i64[T]) -> f32[T, D]
fn pick(scores: f32[B, C], labels: i64[K]) -> f32[B, K]
fn main() -> ()
