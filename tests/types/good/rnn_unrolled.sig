fn cell(c: Cell, h: f32[B, 4], x: f32[B, 3]) -> f32[B, 4]
fn run(c: Cell, xs: f32[T, B, 3]) -> f32[B, 4]
fn main() -> ()
