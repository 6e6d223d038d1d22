fn widen(x: f32[B, 4], w: f32[4, 8]) -> f32[B, 8]
fn main() -> ()
