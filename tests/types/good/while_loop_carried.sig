fn newton_sqrt(a: f32) -> f32
fn main() -> ()
