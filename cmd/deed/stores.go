package main

import (
	"context"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/azblob"
	"github.com/deedkit/deed/bucket/gcs"
	"github.com/deedkit/deed/bucket/s3"
)

// openStore opens loc with the adapter its URL scheme names: s3:// through
// the S3 API, gs:// on Google Cloud Storage, az:// on an Azure Blob Storage
// container. --endpoint points any of them at another server (an
// S3-compatible store, fake-gcs-server, Azurite's blob URL with the account);
// credentials come from each SDK's own environment: the AWS chain,
// Application Default Credentials (or STORAGE_EMULATOR_HOST), and
// AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_ACCOUNT with
// AZURE_STORAGE_KEY or Azure's default chain.
func (cfg *config) openStore(ctx context.Context, loc bucket.Location) (bucket.Bucket, error) {
	switch loc.Scheme {
	case "gs":
		return gcs.Open(ctx, loc, gcs.Options{Endpoint: cfg.endpoint})
	case "az":
		getenv := cfg.inv.Getenv
		if getenv == nil {
			getenv = func(string) string { return "" }
		}
		opts := azblob.OptionsFromEnv(getenv)
		opts.Endpoint = cfg.endpoint
		return azblob.Open(ctx, loc, opts)
	default:
		return s3.Open(ctx, loc, s3.Options{
			Endpoint:    cfg.endpoint,
			Region:      cfg.region,
			Credentials: cfg.inv.Credentials,
		})
	}
}
