fn with_bias(x: f32[B, D]) -> f32[B, D + 1]
fn flatten_heads(x: f32[B, T, 4, K]) -> f32[B, T, K * 4]
fn split_heads(x: f32[B, T, K * 4]) -> f32[B, T, 4, K]
fn interleave(a: f32[N + 1], b: f32[N]) -> f32[N * 2 + 1]
fn main() -> ()
