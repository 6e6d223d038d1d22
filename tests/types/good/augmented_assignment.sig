fn update(w: f32[N], g: f32[N]) -> (f32[N], f32, i64)
fn main() -> ()
