fn square(x: f32[N]) -> f32[N]
fn norm(x: f32[N]) -> f32
fn unit(x: f32[N]) -> f32[N]
fn both(x: f32[N]) -> (f32, f32[N])
fn main() -> ()
