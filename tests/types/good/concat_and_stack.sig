fn with_bias_column(x: f32[B, D]) -> f32[B, D + 1]
fn main() -> ()
