fn updated(grid: f32[2, 3]) -> Params
fn counted() -> i64[3]
fn main() -> ()
