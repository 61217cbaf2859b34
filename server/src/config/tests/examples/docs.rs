//! Every YAML block of the README's and the guide's Envoy and quota
//! service chapters is a verbatim part of the example files.

use super::tokens::{TOKENS_ENVOY, TOKENS_FILE};
use super::*;

/// The ```yaml blocks of `text`.
fn yaml_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match &mut current {
            None if line.trim_start() == "```yaml" => current = Some(String::new()),
            Some(block) if line.trim_start() == "```" => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    blocks
}

#[test]
fn the_yaml_the_readme_and_the_guide_show_is_the_tested_example() {
    let examples = [
        read(root().join("examples/envoy.yaml")),
        read(root().join("examples/config/api.yaml")),
        read(root().join(TOKENS_ENVOY)),
        read(root().join(TOKENS_FILE)),
        read(root().join("examples/quota/envoy.yaml")),
        read(root().join("examples/quota/quota.yaml")),
    ];
    let mut checked = 0;
    for doc in [
        "../README.md",
        "../docs/guide/envoy.md",
        "../docs/guide/quota.md",
    ] {
        for block in yaml_blocks(&read(root().join(doc))) {
            assert!(
                examples.iter().any(|e| e.contains(&block)),
                "a YAML block of {doc} is not part of server/examples:\n{block}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 4, "only {checked} YAML blocks found");
}
