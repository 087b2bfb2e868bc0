public import Registrar
public import SIPProxy

/// What decides an extension's calls to the outside (issue 19): the routes of every organisation,
/// their digest passwords, each extension's class of service and each organisation's national
/// numbers. A snapshot, loaded from PostgreSQL and replaced whole when it changes there (NOTIFY
/// `rouse_routes`); immutable, so safe to share between threads.
public struct OutsideCallPolicy: Sendable {
    public let routes: OutboundRouteTable
    /// Route id → digest password, for routes with credentials.
    let passwords: [Int: String]
    let classes: [AddressOfRecord: ClassOfService]
    let dialPlans: [String: DialPlanClasses]
    /// The class of an extension that has none of its own (`outside_call_class`).
    public let defaultClass: ClassOfService
    /// Gateway mode: the route to each organisation's PBX, which takes every call of its
    /// extensions (to each other too: the PBX keeps the dialplan), after the organisation's own
    /// routes for numbers and domains outside.
    let gateways: [String: (route: OutboundRoute, password: String?)]

    /// - Parameters:
    ///   - routes: every route with its password (nil: no credentials).
    ///   - national: each organisation's national patterns (lower-case organisation keys).
    public init(
        routes: [(route: OutboundRoute, password: String?)], classes: [AddressOfRecord: ClassOfService] = [:],
        national: [String: [RoutePattern]] = [:], defaultClass: ClassOfService = .national,
        gateways: [(route: OutboundRoute, password: String?)] = []
    ) {
        var byOrganisation: [String: (route: OutboundRoute, password: String?)] = [:]
        for gateway in gateways { byOrganisation[gateway.route.organisation] = gateway }
        self.gateways = byOrganisation
        self.routes = OutboundRouteTable(routes.map(\.route))
        var passwords: [Int: String] = [:]
        for entry in routes { if let password = entry.password { passwords[entry.route.id] = password } }
        self.passwords = passwords
        self.classes = classes
        self.dialPlans = national.mapValues { DialPlanClasses(national: $0) }
        self.defaultClass = defaultClass
    }

    /// No routes: every outside call is refused.
    public static let none = OutsideCallPolicy(routes: [])

    public func password(of route: OutboundRoute) -> String? {
        gateways[route.organisation].flatMap { $0.route == route ? $0.password : nil } ?? passwords[route.id]
    }

    /// The route to `organisation`'s PBX in gateway mode.
    public func gateway(for organisation: String) -> OutboundRoute? { gateways[organisation]?.route }

    /// The route of a call from `organisation` to `target`: its own first, then its PBX's.
    public func route(for target: DialledTarget, organisation: String) -> OutboundRoute? {
        routes.route(for: target, organisation: organisation) ?? gateway(for: organisation)
    }

    public func classOfService(of caller: AddressOfRecord) -> ClassOfService { classes[caller] ?? defaultClass }

    /// The class a call from `organisation` to `target` needs.
    public func required(for target: DialledTarget, organisation: String) -> ClassOfService {
        (dialPlans[organisation] ?? DialPlanClasses()).required(for: target)
    }
}
