fn dense(d: Dense, x: f32[B, 2]) -> f32[B, 2]
fn run(net: Net, x: f32[B, 2]) -> f32[B, 2]
fn main() -> ()
