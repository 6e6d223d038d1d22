fn is_even(n: i64) -> bool
fn is_odd(n: i64) -> bool
fn main() -> ()
