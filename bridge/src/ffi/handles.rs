//! The handle table: every object handed to C is named by a 64-bit handle (kind tag, slot
//! index, slot generation) and held here behind its `Arc`. A null, destroyed, reused or
//! wrong-kind handle is [`YUEBING_ERR_INVALID_HANDLE`](super::error::YUEBING_ERR_INVALID_HANDLE),
//! never a dangling pointer: generations make a slot's old handles invalid once it is reused.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use yuebing_store::{Located, Reservation};

use crate::{BlockingClient, BlockingMaster, Bridge, Canceller};

use super::engine_api::EngineObject;
use super::error::{Failure, FfiResult};

/// What a handle names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Bridge = 1,
    Store = 2,
    Engine = 3,
    Batch = 4,
    Call = 5,
    Master = 6,
    Location = 7,
    Reservation = 8,
    Admin = 9,
}

/// An engine's batch, with the engine it belongs to.
#[derive(Clone)]
pub(crate) struct BatchObject {
    pub(crate) engine: crate::BlockingEngine,
    pub(crate) id: yuebing_engine::BatchId,
}

/// The objects C holds.
#[derive(Clone)]
pub(crate) enum Object {
    Bridge(Bridge),
    Store(BlockingClient, Arc<EngineObject>),
    Engine(Arc<EngineObject>),
    Batch(BatchObject),
    Call(Canceller),
    Master(BlockingMaster),
    /// An object a store client located (`yuebing_store_locate`), with its read lease.
    Location(Arc<Located>),
    /// Space reserved for an object (`yuebing_store_batch_reserve`), not readable yet.
    Reservation(Arc<Reservation>),
    /// A store client's admin HTTP server (`yuebing_store_serve_admin`); stopped when the
    /// last reference goes.
    Admin(Arc<yuebing_store::http::AdminServer>),
}

impl Object {
    fn kind(&self) -> Kind {
        match self {
            Object::Bridge(_) => Kind::Bridge,
            Object::Store(..) => Kind::Store,
            Object::Engine(_) => Kind::Engine,
            Object::Batch(_) => Kind::Batch,
            Object::Call(_) => Kind::Call,
            Object::Master(_) => Kind::Master,
            Object::Location(_) => Kind::Location,
            Object::Reservation(_) => Kind::Reservation,
            Object::Admin(_) => Kind::Admin,
        }
    }
}

/// Generations are 24 bits: the top byte of a handle is its kind, the low 32 bits its index.
const GENERATION_MASK: u32 = 0x00ff_ffff;

struct Slot {
    generation: u32,
    object: Option<Object>,
}

/// Slots, and the free ones oldest first (so that a slot is reused as rarely as possible).
struct Table {
    slots: Vec<Slot>,
    free: VecDeque<u32>,
}

static TABLE: Mutex<Table> = Mutex::new(Table {
    slots: Vec::new(),
    free: VecDeque::new(),
});

fn table() -> MutexGuard<'static, Table> {
    TABLE.lock().unwrap_or_else(|p| p.into_inner())
}

fn encode(kind: Kind, index: u32, generation: u32) -> u64 {
    ((kind as u64) << 56) | (u64::from(generation & GENERATION_MASK) << 32) | u64::from(index)
}

/// Stores `object` and returns its new handle (never 0).
pub(crate) fn insert(object: Object) -> FfiResult<u64> {
    let kind = object.kind();
    let mut t = table();
    let index = match t.free.pop_front() {
        Some(i) => i,
        None => {
            let i = u32::try_from(t.slots.len()).map_err(|_| Failure {
                code: super::error::YUEBING_ERR_TOO_MANY_HANDLES,
                message: "the handle table is full".into(),
            })?;
            t.slots.push(Slot {
                generation: 1,
                object: None,
            });
            i
        }
    };
    let slot = &mut t.slots[index as usize];
    slot.object = Some(object);
    Ok(encode(kind, index, slot.generation))
}

/// The slot a handle of `kind` names, if it is live.
fn slot_of(t: &mut Table, handle: u64, kind: Kind) -> FfiResult<&mut Slot> {
    let what = || {
        Failure::handle(format!(
            "{kind:?} handle {handle:#x} is null, destroyed or of another kind"
        ))
    };
    if handle == 0 || (handle >> 56) as u8 != kind as u8 {
        return Err(what());
    }
    let index = handle as u32 as usize;
    let generation = ((handle >> 32) as u32) & GENERATION_MASK;
    match t.slots.get_mut(index) {
        Some(slot) if slot.generation == generation && slot.object.is_some() => Ok(slot),
        _ => Err(what()),
    }
}

/// The object a live handle of `kind` names (a clone: the table keeps its own).
pub(crate) fn get(handle: u64, kind: Kind) -> FfiResult<Object> {
    let mut t = table();
    let slot = slot_of(&mut t, handle, kind)?;
    slot.object
        .clone()
        .ok_or_else(|| Failure::handle("destroyed"))
}

/// Takes the object out: the handle (and every copy of it) is invalid from now on.
pub(crate) fn remove(handle: u64, kind: Kind) -> FfiResult<Object> {
    let mut t = table();
    let slot = slot_of(&mut t, handle, kind)?;
    let object = slot.object.take();
    slot.generation = (slot.generation + 1) & GENERATION_MASK;
    // A slot whose generations ran out is retired: were it reused, a handle from its first
    // generation would name the new object.
    if slot.generation != 0 {
        let index = handle as u32;
        t.free.push_back(index);
    }
    object.ok_or_else(|| Failure::handle("destroyed"))
}

/// The typed lookups: `name(handle)` is the object a live handle of that kind names.
macro_rules! lookups {
    ($($(#[$doc:meta])* $name:ident: $kind:ident -> $ty:ty;)*) => {$(
        $(#[$doc])*
        pub(crate) fn $name(handle: u64) -> FfiResult<$ty> {
            match get(handle, Kind::$kind)? {
                Object::$kind(object) => Ok(object),
                _ => Err(Failure::handle(concat!("the handle names no ", stringify!($name)))),
            }
        }
    )*};
}

lookups! {
    /// A bridge.
    bridge: Bridge -> Bridge;
    /// An engine's object.
    engine: Engine -> Arc<EngineObject>;
    /// A batch.
    batch: Batch -> BatchObject;
    /// A call's canceller.
    call: Call -> Canceller;
    /// A master connection.
    master: Master -> BlockingMaster;
    /// A located object.
    location: Location -> Arc<Located>;
    /// A reservation.
    reservation: Reservation -> Arc<Reservation>;
    /// An admin server.
    admin: Admin -> Arc<yuebing_store::http::AdminServer>;
}

/// The store client and its engine's object.
pub(crate) fn store(handle: u64) -> FfiResult<(BlockingClient, Arc<EngineObject>)> {
    match get(handle, Kind::Store)? {
        Object::Store(c, e) => Ok((c, e)),
        _ => Err(Failure::handle("not a store")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canceller() -> Canceller {
        Canceller::detached()
    }

    #[test]
    fn stale_null_and_wrong_kind_handles_are_refused() {
        let h = insert(Object::Call(canceller())).unwrap();
        assert_ne!(h, 0);
        assert!(call(h).is_ok());
        assert!(call(0).is_err());
        assert!(master(h).is_err(), "wrong kind");
        assert!(call(h ^ (1 << 33)).is_err(), "wrong generation");
        remove(h, Kind::Call).unwrap();
        assert!(call(h).is_err(), "destroyed");
        assert!(remove(h, Kind::Call).is_err(), "destroyed twice");
        // The slot is reused under a new generation: the old handle stays invalid.
        let h2 = insert(Object::Call(canceller())).unwrap();
        assert_ne!(h, h2);
        assert!(call(h).is_err());
        assert!(call(h2).is_ok());
        remove(h2, Kind::Call).unwrap();
    }
}
