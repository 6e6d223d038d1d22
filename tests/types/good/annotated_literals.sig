fn half() -> f64
fn decayed(s: Schedule, step: i32) -> f64
fn main() -> ()
