import Foundation
import Push
import Registrar
import RouseVocabulary
import Storage

extension CommandLineInterface.PushCommandContext {
    /// `rouse push test --webpush ENDPOINT`: one test ring push to a web push subscription exactly
    /// as a call sends it (Rouse's VAPID key, the subscription's posted keys when there are some,
    /// `webpush_allowed_hosts`, the push settings' retries, breaker and proxy), recorded and
    /// printed like an app's test push.
    func testWebPush(endpoint: String) throws {
        guard WebPushEndpoint.origin(of: endpoint) != nil else {
            throw CommandLineInterface.CommandLineProblem("--webpush: not a web push subscription endpoint (an https:// URL)")
        }
        let vapid = try PostgresVAPIDKeys.loadOrCreate(on: connection)
        let keys = try PostgresWebPushSubscriptions.keys(forEndpoint: endpoint, on: connection)
        let domains = try PostgresDirectory(settings: configuration.databaseSettings).loadDirectory().domains
        let settings = pushSettings
        let client = WebPushClient(
            vapid: vapid, contact: configuration.webPushSubject(domains: domains), caFile: settings.caFile, timeout: settings.timeout,
            subscriptions: KnownSubscriptionKeys(endpoint: endpoint, keys: keys),
            allowedHosts: WebPushHostPolicy(entries: configuration.webPushAllowedHosts), retry: settings.retry, breaker: settings.breaker,
            proxy: settings.proxy)
        let channel = PushChannel(provider: .webpush, token: endpoint, param: nil, kind: .standard)
        try testPush(family: .webpush, token: endpoint, provider: .webpush, appID: nil, through: "web push") {
            await PushService(settings: settings, apps: [], webPush: client).sendTest(to: channel, recordOutcome: false)
        }
    }
}

/// The posted keys of the one subscription a command pushes to, read before the push. A value.
private struct KnownSubscriptionKeys: WebPushSubscriptionKeySource {
    let endpoint: String
    let keys: WebPushSubscriptionKeys?

    func keys(forEndpoint endpoint: String) async throws -> WebPushSubscriptionKeys? {
        endpoint == self.endpoint ? keys : nil
    }
}
