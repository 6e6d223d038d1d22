fn flatten(images: f32[N, 2, 3]) -> f32[N, 6]
fn main() -> ()
