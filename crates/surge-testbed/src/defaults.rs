//! The test bed's defaults (its name, the links' MTU), which the error
//! messages, `Spec::new` and the CLI all name. A leaf module: it uses
//! nothing from the rest of the crate.

pub const DEFAULT_NAME: &str = "tb";
pub const DEFAULT_MTU: u32 = 9000;
