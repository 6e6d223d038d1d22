fn clip(x: f32[3], limit: f32) -> f32[3]
fn main() -> ()
