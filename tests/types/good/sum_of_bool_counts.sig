fn count_positive(x: f32[N]) -> i64
fn main() -> ()
