fn probabilities(w: f32[D], b: f32, x: f32[N, D]) -> f32[N]
fn binary_cross_entropy(p: f32[N], y: f32[N]) -> f32
fn main() -> ()
