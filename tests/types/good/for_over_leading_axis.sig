fn row_norms(x: f32[B, D]) -> f32[B]
fn main() -> ()
