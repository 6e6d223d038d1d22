fn make_model(scale: f32) -> fn layer
fn main() -> ()
