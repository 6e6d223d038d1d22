fn gelu_ish(x: f32[N]) -> f32[N]
fn clip(x: f32[B, D], lo: f32, hi: f32) -> f32[B, D]
fn main() -> ()
