//! How many core WebAssembly instances a component creates when it is
//! instantiated: what a module's `core_instances` limit is checked against.
//!
//! wasmtime checks the count against the pool as a whole (the largest any
//! module may be given) while it compiles, but does not say what a module
//! needs; this walks the component's binary for it. Every core module
//! instantiation counts once for each instantiation of the component that
//! holds it, nested components included, as wasmtime counts them (the
//! Rust guests: 3; componentize-py's output: 14, or 38 with `--stub-wasi`).
//! Instances assembled from exports are not instantiations and do not count.

use wasmparser::{
    ComponentAlias, ComponentExternalKind, ComponentInstance, ComponentOuterAliasKind,
    ComponentTypeRef, Instance, Parser, Payload, SectionLimited,
};

/// A component (or core module) being walked: the instances it creates, and
/// how many each component in its component index space creates.
enum Frame {
    /// A core module nested in a component: nothing in it counts.
    Module,
    Component {
        instances: u64,
        components: Vec<u64>,
    },
}

impl Frame {
    fn component() -> Frame {
        Frame::Component {
            instances: 0,
            components: Vec::new(),
        }
    }
}

/// The core instances `bytes` (a component) creates per instantiation.
pub(crate) fn core_instances(bytes: &[u8]) -> Result<u64, wasmparser::BinaryReaderError> {
    let mut stack = vec![Frame::component()];
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload?;
        match payload {
            Payload::ModuleSection { .. } => stack.push(Frame::Module),
            Payload::ComponentSection { .. } => stack.push(Frame::component()),
            Payload::End(_) => match (stack.pop(), stack.last_mut()) {
                (Some(Frame::Component { instances, .. }), None) => return Ok(instances),
                (
                    Some(Frame::Component { instances, .. }),
                    Some(Frame::Component { components, .. }),
                ) => components.push(instances),
                _ => {}
            },
            payload => {
                let aliased = match &payload {
                    Payload::ComponentAliasSection(reader) => {
                        aliased_components(reader.clone(), &stack)?
                    }
                    _ => Vec::new(),
                };
                let Some(Frame::Component {
                    instances,
                    components,
                }) = stack.last_mut()
                else {
                    continue;
                };
                components.extend(aliased);
                count_section(payload, instances, components)?;
            }
        }
    }
    Ok(0)
}

/// The components an alias section adds to the innermost component's index
/// space, each as the core instances it creates; `stack` is the components
/// being walked, the innermost last.
fn aliased_components(
    aliases: SectionLimited<'_, ComponentAlias<'_>>,
    stack: &[Frame],
) -> Result<Vec<u64>, wasmparser::BinaryReaderError> {
    let mut aliased = Vec::new();
    for alias in aliases {
        match alias? {
            ComponentAlias::Outer {
                kind: ComponentOuterAliasKind::Component,
                count,
                index,
            } => {
                let outer = stack
                    .len()
                    .checked_sub(1 + count as usize)
                    .and_then(|level| stack.get(level));
                aliased.push(match outer {
                    Some(Frame::Component { components, .. }) => {
                        components.get(index as usize).copied().unwrap_or(0)
                    }
                    _ => 0,
                });
            }
            // A component exported by an instance: its instantiations are
            // not visible here.
            ComponentAlias::InstanceExport {
                kind: ComponentExternalKind::Component,
                ..
            } => aliased.push(0),
            _ => {}
        }
    }
    Ok(aliased)
}

/// Adds what one section of a component creates or names.
fn count_section(
    payload: Payload<'_>,
    instances: &mut u64,
    components: &mut Vec<u64>,
) -> Result<(), wasmparser::BinaryReaderError> {
    match payload {
        Payload::InstanceSection(reader) => {
            for instance in reader {
                if let Instance::Instantiate { .. } = instance? {
                    *instances = instances.saturating_add(1);
                }
            }
        }
        Payload::ComponentInstanceSection(reader) => {
            for instance in reader {
                if let ComponentInstance::Instantiate {
                    component_index, ..
                } = instance?
                {
                    let created = components
                        .get(component_index as usize)
                        .copied()
                        .unwrap_or(0);
                    *instances = instances.saturating_add(created);
                }
            }
        }
        Payload::ComponentImportSection(reader) => {
            for import in reader {
                // An imported component is the host's to instantiate.
                if let ComponentTypeRef::Component(_) = import?.ty {
                    components.push(0);
                }
            }
        }
        Payload::ComponentExportSection(reader) => {
            for export in reader {
                let export = export?;
                if export.kind == ComponentExternalKind::Component {
                    let created = components.get(export.index as usize).copied().unwrap_or(0);
                    components.push(created);
                }
            }
        }
        _ => {}
    }
    Ok(())
}
