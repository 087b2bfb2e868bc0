import CallRouting
import Foundation
import HTTPServer
import Push
import Registrar
import RouseVocabulary
import Storage

/// The admin API's answers as values, encoded by `HTTPJSON` (and by `rouse … --json` through
/// `AdminAPI.item`, so the command line and the API print the same fields). Fields that are
/// always in an answer are written `null` when they have no value. Values, safe to share.
enum AdminAnswer {
    /// A list and its length.
    struct List<Item: Encodable & Sendable>: Encodable, Sendable {
        let items: [Item]
        let total: Int
    }

    /// A page of the extension list: the items from `offset`, at most `limit`, of `total`.
    struct ExtensionPage: Encodable, Sendable {
        let items: [Extension]
        let total: Int
        let limit: Int
        let offset: Int
    }

    /// An organisation in a list.
    struct Organisation: Encodable, Sendable {
        let domain: String
        let extensionCount: Int
        let createdAt: String

        init(_ domain: DirectoryDomain) {
            self.domain = domain.domain
            extensionCount = domain.extensionCount
            createdAt = AdminAPI.iso(domain.createdAt)
        }
    }

    /// An extension in a list.
    struct Extension: Encodable, Sendable {
        let address: String
        @NullWhenAbsent var displayName: String?
        let liveBindings: Int
        let createdAt: String
        let updatedAt: String

        init(_ item: DirectoryExtension) {
            address = item.aor.description
            displayName = item.displayName
            liveBindings = item.liveBindingCount
            createdAt = AdminAPI.iso(item.createdAt)
            updatedAt = AdminAPI.iso(item.updatedAt)
        }
    }

    /// An extension's address and display name, once added or changed (null: none).
    struct DisplayNameSet: Encodable, Sendable {
        let address: String
        @NullWhenAbsent var displayName: String?
    }

    /// A push app in a list: what it is, never its key.
    struct PushAppItem: Encodable, Sendable {
        let id: Int64
        let kind: String
        let param: String
        @NullWhenAbsent var environment: String?
        let details: String
        let createdAt: String

        init(_ app: PostgresPushApps.Summary) {
            id = app.id
            kind = app.kind
            param = app.param
            environment = app.environment
            details = app.details
            createdAt = app.createdAt
        }
    }

    /// A push app added or changed, with the validation notes.
    struct PushAppSaved: Encodable, Sendable {
        let id: Int64
        let kind: String
        let param: String
        let notes: [String]
    }

    /// A push channel of a binding; the token shortened unless whole tokens were asked for.
    struct Channel: Encodable, Sendable {
        let provider: String
        let token: String
        @NullWhenAbsent var param: String?
        let kind: String
        let dead: Bool
    }

    /// Where a binding's REGISTER came from.
    struct Flow: Encodable, Sendable {
        let transport: String
        let source: String
    }

    /// A registered binding with its device id and push channels.
    struct BindingItem: Encodable, Sendable {
        let id: String
        let testable: Bool
        let contact: String
        @NullWhenAbsent var userAgent: String?
        let flow: Flow
        let expiresIn: Int
        let pushChannels: [Channel]

        init(_ binding: Binding, now: Date, isDead: (PushChannel) -> Bool, wholeTokens: Bool) {
            let device = AdminReads.Device(binding)
            id = device.id
            testable = device.ringChannel != nil
            contact = binding.contactForDisplay
            userAgent = binding.userAgent
            flow = Flow(transport: binding.flow.transport.rawValue, source: binding.flow.sourceText)
            expiresIn = binding.remainingSeconds(at: now)
            pushChannels = binding.pushChannels.map { channel in
                Channel(
                    provider: channel.provider.rawValue, token: wholeTokens ? channel.token : Binding.shortenedToken(channel.token),
                    param: channel.param, kind: channel.kind.rawValue, dead: isDead(channel))
            }
        }
    }

    /// A posted token with its device id.
    struct PostedTokenItem: Encodable, Sendable {
        let id: String
        let testable: Bool
        let platform: String
        let token: String
        @NullWhenAbsent var param: String?
        let kind: String
        @NullWhenAbsent var deviceId: String?
        let postedAt: String
        let dead: Bool

        init(_ posted: PostedPushToken, isDead: (PushChannel) -> Bool, wholeTokens: Bool) {
            let device = AdminReads.Device(posted)
            id = device.id
            testable = device.ringChannel != nil
            platform = AdminAPI.platform(posted.channel.provider)
            token = wholeTokens ? posted.channel.token : Binding.shortenedToken(posted.channel.token)
            param = posted.channel.param
            kind = posted.channel.kind.rawValue
            deviceId = posted.deviceID
            postedAt = AdminAPI.iso(posted.postedAt)
            dead = isDead(posted.channel)
        }
    }

    /// A ring push's wake result: its word, the milliseconds to the fresh REGISTER, and in words.
    struct Wake: Encodable, Sendable {
        let result: String
        @NullWhenAbsent var afterMs: Int?
        let words: String

        init(_ wake: WakeResult) {
            result = wake.word
            afterMs = wake.milliseconds
            words = wake.words
        }
    }

    /// One of an extension's recent pushes.
    struct RecentPush: Encodable, Sendable {
        let time: String
        let provider: String
        let outcome: String
        @NullWhenAbsent var status: Int?
        @NullWhenAbsent var reason: String?
        let explanation: String
        let latencyMs: Int
        @NullWhenAbsent var device: String?
        @NullWhenAbsent var wake: Wake?

        init(_ record: PushRecord) {
            time = AdminAPI.iso(record.createdAt)
            provider = record.provider.rawValue
            outcome = record.outcome
            status = record.status
            reason = record.reason
            explanation = record.explanation
            latencyMs = record.latencyMilliseconds
            device = record.device
            wake = record.wake.map(Wake.init)
        }
    }

    /// An extension with its devices, posted tokens, recent pushes and calls.
    struct ExtensionDetail: Encodable, Sendable {
        let address: String
        /// What ring pushes call it (`callee_name`); null when it has none.
        @NullWhenAbsent var displayName: String?
        let bindings: [BindingItem]
        let postedTokens: [PostedTokenItem]
        let recentPushes: [RecentPush]
        let recentCalls: [CallSummary]
        /// Its own class of service; null: the instance's `outside_call_class`.
        @NullWhenAbsent var classOfService: String?
    }

    /// A call as the call list and an extension's detail show it.
    struct CallSummary: Encodable, Sendable {
        let id: String
        let callId: String
        let uuid: String
        let callee: String
        let caller: String
        @NullWhenAbsent var callerName: String?
        let transport: String
        let startedAt: String
        @NullWhenAbsent var answeredAt: String?
        @NullWhenAbsent var endedAt: String?
        let outcome: String
        let missed: Bool
        @NullWhenAbsent var finalStatus: Int?
        @NullWhenAbsent var reason: String?
        @NullWhenAbsent var answeredBy: String?
        @NullWhenAbsent var ringMs: Int?

        init(_ journey: CallJourney) {
            id = journey.id.uuidString.lowercased()
            callId = journey.callID
            uuid = journey.uuid
            callee = journey.callee.description
            caller = journey.caller
            callerName = journey.callerName
            transport = journey.transport
            startedAt = MillisecondTime.string(journey.startedAt)
            answeredAt = journey.answeredAt.map(MillisecondTime.string)
            endedAt = journey.endedAt.map(MillisecondTime.string)
            outcome = journey.outcome.rawValue
            missed = journey.missed
            finalStatus = journey.finalStatus
            reason = journey.reason
            answeredBy = journey.answeredBy
            ringMs = journey.ringMilliseconds
        }
    }

    /// A page of calls, newest first; `next` is the cursor of the following page.
    struct CallPage: Encodable, Sendable {
        let calls: [CallSummary]
        @NullWhenAbsent var next: String?
    }

    /// A push of a call's journey.
    struct JourneyPushItem: Encodable, Sendable {
        let id: String
        let device: String
        let provider: String
        @NullWhenAbsent var appId: Int64?
        let token: String
        let outcome: String
        @NullWhenAbsent var status: Int?
        @NullWhenAbsent var reason: String?
        let explanation: String
        let latencyMs: Int
        let sentAt: String
        let wake: Wake
        let line: String

        init(_ push: JourneyPush) {
            id = push.id.uuidString.lowercased()
            device = push.device
            provider = push.provider.rawValue
            appId = push.appID
            token = push.tokenShort
            outcome = push.outcome
            status = push.status
            reason = push.reason
            explanation = push.explanation
            latencyMs = push.latencyMilliseconds
            sentAt = MillisecondTime.string(push.sentAt)
            wake = Wake(push.wake)
            line = push.line
        }
    }

    /// A response a branch got.
    struct BranchResponse: Encodable, Sendable {
        let status: Int
        let reason: String
        let at: String
    }

    /// A branch of a call's journey.
    struct Branch: Encodable, Sendable {
        let bindingId: String
        let target: String
        let device: String
        let transport: String
        let startedAt: String
        let lateFork: Bool
        let responses: [BranchResponse]
        @NullWhenAbsent var canceledBecause: String?
        @NullWhenAbsent var endedAt: String?

        init(_ branch: JourneyBranch) {
            bindingId = branch.bindingID.uuidString.lowercased()
            target = branch.target
            device = branch.device
            transport = branch.transport
            startedAt = MillisecondTime.string(branch.startedAt)
            lateFork = branch.isLateFork
            responses = branch.responses.map { BranchResponse(status: $0.status, reason: $0.reason, at: MillisecondTime.string($0.at)) }
            canceledBecause = branch.canceledBecause
            endedAt = branch.endedAt.map(MillisecondTime.string)
        }
    }

    /// An event of a call's journey.
    struct Event: Encodable, Sendable {
        let at: String
        let text: String
    }

    /// A call with its journey: the summary's fields, where it came from, its pushes, branches and events.
    struct CallDetail: Encodable, Sendable {
        let summary: CallSummary
        let source: String
        let instanceId: String
        let pushes: [JourneyPushItem]
        let branches: [Branch]
        let events: [Event]

        init(_ journey: CallJourney) {
            summary = CallSummary(journey)
            source = journey.source
            instanceId = journey.instanceID
            pushes = journey.pushes.map(JourneyPushItem.init)
            branches = journey.branches.map(Branch.init)
            events = journey.events.map { Event(at: MillisecondTime.string($0.at), text: $0.text) }
        }

        private enum Keys: String, CodingKey {
            case source, instanceId, pushes, branches, events
        }

        /// The summary's fields and the journey's, in one object.
        func encode(to encoder: any Encoder) throws {
            try summary.encode(to: encoder)
            var container = encoder.container(keyedBy: Keys.self)
            try container.encode(source, forKey: .source)
            try container.encode(instanceId, forKey: .instanceId)
            try container.encode(pushes, forKey: .pushes)
            try container.encode(branches, forKey: .branches)
            try container.encode(events, forKey: .events)
        }
    }

    /// Where a device's test push went (the device test only).
    struct SentTo: Sendable {
        let device: String
        let provider: String
        let token: String
        let appId: Int64?
    }

    /// A test push's answer: the outcome in words, and for a device where it went.
    struct TestPushResult: Encodable, Sendable {
        let outcome: String
        let description: String
        let latencyMs: Int
        let sentTo: SentTo?

        private enum Keys: String, CodingKey {
            case outcome, description, latencyMs, device, provider, token, appId
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Keys.self)
            try container.encode(outcome, forKey: .outcome)
            try container.encode(description, forKey: .description)
            try container.encode(latencyMs, forKey: .latencyMs)
            guard let sentTo else { return }
            try container.encode(sentTo.device, forKey: .device)
            try container.encode(sentTo.provider, forKey: .provider)
            try container.encode(sentTo.token, forKey: .token)
            if let appId = sentTo.appId { try container.encode(appId, forKey: .appId) } else { try container.encodeNil(forKey: .appId) }
        }
    }

    /// `value` as the dictionary `JSONSerialization` reads from its JSON (for `rouse … --json`).
    static func dictionary(_ value: some Encodable) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: HTTPJSON.encode(value))) as? [String: Any] ?? [:]
    }
}
