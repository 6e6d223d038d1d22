fn train(losses: f32[N], patience: i64) -> i64
fn main() -> ()
