fn literals() -> (i64, f32, bool, str)
fn hidden(x: f32[B, 4]) -> (f32[B, 3], f32[B])
fn main() -> ()
