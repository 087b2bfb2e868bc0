import Foundation
import RouseVocabulary

extension PushService {
    /// A push to a web push subscription (`channel.token` is its endpoint): the payload's JSON
    /// encrypted to the subscription, `Urgency` (`high` for a call's ring and cancel: a call cannot
    /// wait for the browser's next wake-up), `TTL` until `expiresAt`, and the call's UUID as
    /// `Topic`, so a cancel replaces a ring the push service still holds.
    func sendWebPush(
        _ payload: PushPayload, to channel: PushChannel, expiresAt: Date, urgency: WebPushMessage.Urgency = .high
    ) async -> PushOutcome {
        guard let webPush else {
            return PushOutcome(result: .failed(.noApp, message: "web push is not set up here (no VAPID key)"), latency: .zero)
        }
        let message = WebPushMessage(
            payload: payload.webPushBody, ttlSeconds: max(0, Int(expiresAt.timeIntervalSinceNow.rounded(.up))), urgency: urgency,
            topic: WebPushMessage.topic(forCallUUID: payload.value("uuid")))
        return await webPush.send(message, to: channel.token)
    }
}
