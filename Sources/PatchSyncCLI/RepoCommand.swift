import ArgumentParser

struct RepoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "repo",
        abstract: "Create a repository, re-sign, renew or rotate its metadata, release builds, prune.",
        subcommands: [
            RepoInit.self, RepoStatus.self, RepoCheck.self, RepoRefresh.self, RepoRelease.self, RepoRenew.self,
            RepoRotateRoot.self,
            RepoPromote.self, RepoRollback.self, RepoWithdraw.self, RepoPrune.self
        ])
}
