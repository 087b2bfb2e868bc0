public import Foundation
import Push
public import Registrar

/// How the coordinator mints wake credentials (`wake_credentials`, docs/app-builders.md "Wake in
/// one round trip"): the signer, and where to retire the credentials of a call that ended before
/// its wait did (the registrar of this instance, which alone accepts them). A value; thread-safe.
public struct WakeCredentialMinting: Sendable {
    public var signer: WakeCredentialSigner
    /// Called with credential ids and the end of their wait; must not block.
    public var retire: @Sendable ([String], Date) -> Void

    public init(signer: WakeCredentialSigner, retire: @escaping @Sendable ([String], Date) -> Void) {
        self.signer = signer
        self.retire = retire
    }
}

extension CallCoordinatorShard {
    /// On `queue`: the wake credential of a ring push, when minting is on and the call's wake wait
    /// has not ended: for this call, its callee and the pushed device (ring token, instance id),
    /// held by this instance, until the wait ends. Its id is the push's, so the call can retire it.
    func wakeCredential(for order: CallPushOrder, of entry: CallEntry, now: Date) -> String? {
        let machine = entry.machine
        guard let wakeCredentials, machine.devices.indices.contains(order.device), machine.waitDeadline > now else { return nil }
        let device = machine.devices[order.device].device
        return wakeCredentials.signer.issue(WakeCredentialClaims(
            id: Self.wakeCredentialID(order.pushID), callID: machine.setup.id, aor: machine.setup.callee, device: order.tag,
            instance: device.instance.map(WakeCredentialClaims.tag), holder: instanceID, expiresAt: machine.waitDeadline), now: now)
    }

    /// On `queue`: a call that ended within its wake wait retires its devices' credentials, so a
    /// credential is good only while its call waits for the device.
    func retireWakeCredentials(of entry: CallEntry, now: Date) {
        let machine = entry.machine
        guard let wakeCredentials, machine.waitDeadline > now, machine.waitDeadline != .distantFuture, !machine.devices.isEmpty else { return }
        wakeCredentials.retire(machine.devices.map { Self.wakeCredentialID($0.pushID) }, machine.waitDeadline)
    }

    static func wakeCredentialID(_ pushID: UUID) -> String { pushID.uuidString.lowercased() }
}
