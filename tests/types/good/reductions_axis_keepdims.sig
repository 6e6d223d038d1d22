fn stats(x: f32[B, D]) -> (f32, f32[B], f32[D], f32[B, 1], f32[B])
fn main() -> ()
