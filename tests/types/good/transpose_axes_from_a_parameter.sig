fn arranged(x: f32[2, 3], perm: (i64, i64)) -> f32[3, 2]
fn arranged(x: f32[2, 3], perm: (i64, i64)) -> f32[2, 3]
fn main() -> ()
