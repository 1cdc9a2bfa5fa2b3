// FuseKit
