// `coordfs status --cluster` and `coordfs watch --cluster` through the control socket.

extension ControlClient {
    /// The cluster as the mount's node sees it (`notFound` when the mount is no node of a cluster).
    package func clusterStatus() async throws(ControlTransportError) -> ClusterStatusReport {
        let reply = try await request { .clusterStatus(ClusterStatusQuery(id: $0)) }
        guard case .clusterStatusReport(let report) = reply else { throw .unexpectedReply(reply.typeName) }
        return report
    }

    /// Every node's coordination steps from the cursor `from` (nil: only the cursor of now).
    package func clusterSteps(from: UInt64?) async throws(ControlTransportError) -> ClusterStepList {
        let reply = try await request { .clusterSteps(ClusterStepsQuery(id: $0, from: from)) }
        guard case .clusterStepList(let list) = reply else { throw .unexpectedReply(reply.typeName) }
        return list
    }
}
