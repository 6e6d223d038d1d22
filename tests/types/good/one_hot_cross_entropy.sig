fn cross_entropy(logits: f32[B, C], labels: i64[B]) -> f32
fn main() -> ()
