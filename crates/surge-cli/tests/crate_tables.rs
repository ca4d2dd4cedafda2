//! The crate tables of README.md ("Crates") and docs/architecture.md
//! ("Crates") name every crate under crates/, and nothing that is not one:
//! a new crate, or one removed or renamed, fails here until both tables say so.
//! A table row names its crate in its first cell, as `crates/NAME`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The crates: the directories under crates/ that hold a Cargo.toml.
fn crates_on_disk(root: &Path) -> BTreeSet<String> {
    fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|dir| dir.join("Cargo.toml").is_file())
        .map(|dir| dir.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

/// The crates the table headed `| crate |` names: the `crates/NAME` of each row's first cell.
fn crates_in_table(markdown: &str) -> BTreeSet<String> {
    let first_cell = |line: &str| Some(line.strip_prefix('|')?.split('|').next()?.trim().trim_matches('`').to_string());
    markdown
        .lines()
        .skip_while(|line| first_cell(line).as_deref() != Some("crate"))
        .take_while(|line| line.starts_with('|'))
        .filter_map(|line| first_cell(line)?.strip_prefix("crates/").map(|name| name.trim_end_matches('/').to_string()))
        .collect()
}

#[test]
fn only_the_crate_tables_rows_name_crates_each_in_its_first_cell() {
    let doc = "| read | for |\n|---|---|\n| `crates/surge-client/include/surge.h` | the C API |\n\n\
               | crate | what |\n|---|---|\n| `crates/surged` | see `crates/surge-proto` |\n| `tuner/` | Python |\n\n\
               | `crates/surge-fuse` | after the table |\n";
    assert_eq!(crates_in_table(doc), BTreeSet::from(["surged".to_string()]));
}

#[test]
fn the_readme_and_architecture_crate_tables_list_every_crate_and_only_crates() {
    let root = repository();
    let crates = crates_on_disk(&root);
    assert!(crates.contains("surged") && crates.contains("surge-cli"), "found {crates:?}");
    for doc in ["README.md", "docs/architecture.md"] {
        let listed = crates_in_table(&fs::read_to_string(root.join(doc)).unwrap());
        let missing: Vec<_> = crates.difference(&listed).collect();
        let not_crates: Vec<_> = listed.difference(&crates).collect();
        assert!(
            missing.is_empty() && not_crates.is_empty(),
            "{doc}'s crate table: add a row for {missing:?}, remove the row of {not_crates:?} (not a crate under crates/)"
        );
    }
}
