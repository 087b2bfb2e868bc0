/// A stored push app that cannot push, found without sending anything (`PushApp.problems`): at
/// start-up and whenever the apps are reloaded. Says which app and what is wrong, never the key.
/// A value; thread-safe.
public struct BrokenPushApp: Sendable, Equatable, CustomStringConvertible {
    public let appID: Int64?
    /// `apns` or `fcm`.
    public let kind: String
    /// The topic (APNs) or project (FCM) the app was given, to tell apps apart.
    public let names: String
    public let problem: PushAppError

    init(_ app: PushApp, _ problem: PushAppError) {
        appID = app.id
        kind = app.kind
        switch app.credentials {
        case .apns(let apns): names = apns.topic.isEmpty ? "no topic" : "topic \(apns.topic)"
        case .fcm(let fcm): names = fcm.projectID.isEmpty ? "no project" : "project \(fcm.projectID)"
        }
        self.problem = problem
    }

    /// "push app #3 (apns, topic com.example.app) cannot push: key: …".
    public var description: String {
        "push app #\(appID.map(String.init) ?? "?") (\(kind), \(names)) cannot push: \(problem)"
    }
}

extension PushService {
    /// Each provider host backed off now, in words for `/health`: "push provider apns
    /// (com.example.app) backed off: 5 failures, last: …; next try in 8 s". Thread-safe; quick.
    public var providerProblems: [String] {
        circuits.compactMap(\.problem).sorted()
    }

    /// Everything `/health` says of push: each broken app, then each provider host backed off.
    /// Thread-safe; quick (the apps were checked when they were loaded).
    public var healthProblems: [String] {
        brokenApps.map(\.description) + providerProblems
    }

    /// How many provider hosts are backed off now (`/metrics`).
    public var backedOffProviderCount: Int {
        circuits.filter(\.isBackedOff).count
    }

    /// Checks `apps` without pushing (`PushApp.problems`): one entry per problem.
    static func check(_ apps: [PushApp]) -> [BrokenPushApp] {
        apps.flatMap { app in app.problems().map { BrokenPushApp(app, $0) } }
    }
}
