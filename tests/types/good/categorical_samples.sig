fn sample(logits: f32[B, V], seed: i64) -> i64[B]
fn main() -> ()
