import Foundation
import RouseVocabulary

extension PushService {
    /// A push to a web push subscription (`channel.token` is its endpoint): the payload's JSON
    /// encrypted to the subscription, `Urgency` (`high` for a call's ring and cancel: a call cannot
    /// wait for the browser's next wake-up), `TTL` until `expiresAt`, and the call's UUID as
    /// `Topic`, so a cancel replaces a ring the push service still holds.
    /// Transient failures are sent again until `deadline` at most (by default, and never later
    /// than, `expiresAt`), as for APNs and FCM.
    func sendWebPush(
        _ payload: PushPayload, to channel: PushChannel, expiresAt: Date, urgency: WebPushMessage.Urgency = .high, deadline: Date? = nil
    ) async -> PushOutcome {
        guard let webPush else {
            return PushOutcome(result: .failed(.noApp, message: "web push is not set up here (no VAPID key)"), latency: .zero)
        }
        let message = WebPushMessage(
            payload: payload.webPushBody, ttlSeconds: max(0, Int(expiresAt.timeIntervalSinceNow.rounded(.up))), urgency: urgency,
            topic: WebPushMessage.topic(forCallUUID: payload.value("uuid")))
        return await webPush.send(message, to: channel.token, deadline: min(deadline ?? expiresAt, expiresAt))
    }
}
