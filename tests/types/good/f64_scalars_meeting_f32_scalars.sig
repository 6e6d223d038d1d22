fn throughput(steps: i64, start: f64) -> f64
fn main() -> ()
