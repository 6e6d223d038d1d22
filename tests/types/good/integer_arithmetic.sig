fn batches(n: i64, size: i64) -> i64
fn main() -> ()
