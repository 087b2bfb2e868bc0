public import Foundation

/// A change to the durable location service; the registrar sends a batch per REGISTER.
public enum BindingChange: Hashable, Sendable {
    /// Insert or replace the binding (matched by id), with its push channels. Saving a binding also
    /// clears any dead mark on its tokens: a device that registers a token again revives it.
    case save(Binding)
    /// The binding registered again with nothing changed but its CSeq, registration and expiry
    /// times (same Contact, Call-ID, flow, Path and User-Agent, no push channels): the store may
    /// write those three alone. If the stored row is gone, it is saved whole, as `save` would.
    case refresh(Binding)
    /// Remove the binding, saying why (announced with the change).
    case delete(Binding, BindingEvent.Kind)
}

/// What happened to a binding: announced in process and, after commit, to other instances with
/// PostgreSQL `NOTIFY rouse_bindings` (payload `<kind> <aor> <binding id>`).
public struct BindingEvent: Hashable, Sendable {
    public enum Kind: String, Hashable, Sendable {
        case added, refreshed, removed, expired
    }

    public var kind: Kind
    public var binding: Binding

    public init(kind: Kind, binding: Binding) {
        self.kind = kind
        self.binding = binding
    }
}

/// The durable side of the location service (PostgreSQL in production, implemented by `Storage`).
/// The registrar keeps its own in-memory index and calls this to make changes durable.
public protocol LocationStore: Sendable {
    /// Every binding not expired at `now`. Blocking: called at start, off the SIP path.
    func loadBindings(now: Date) throws -> [Binding]

    /// The live bindings of one extension (after another instance announced a change). Blocking.
    func loadBindings(for aor: AddressOfRecord, now: Date) throws -> [Binding]

    /// Applies the changes in one transaction, together with other pending batches (group commit),
    /// and calls `completion` after COMMIT, or with the error. Returns at once; never blocks.
    func apply(_ changes: [BindingChange], completion: @escaping @Sendable (Result<Void, any Error>) -> Void)
}
