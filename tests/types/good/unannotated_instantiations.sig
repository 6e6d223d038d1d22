fn normalize(x: f32[3]) -> f32[3]
fn normalize(x: f32[2, 2]) -> f32[2, 2]
fn normalize(x: f32[4]) -> f32[4]
fn main() -> ()
