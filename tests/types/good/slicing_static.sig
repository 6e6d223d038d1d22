fn split(x: f32[10]) -> (f32[8], f32[2], f32[5], f32[3])
fn main() -> ()
